"""In-process checks against the real nemo-gym 0.7.0 wheel: judge failures, verify from a mixin, a nested model call.

Run by e2e/run.py with the 0.7.0 venv's Python, after the collections (or by hand:
`.venv-e2e-070/bin/python e2e/inprocess_070.py`). It instruments with the SDK's in-memory span
exporter and metric reader, builds real resources servers, takes the FastAPI app each one's own
`setup_webserver()` returns (0.7.0 registers `/verify` as
`traced_verify_endpoint(judge_failsafe(self.verify), ...)`) and POSTs to `/verify` through
FastAPI's TestClient, a real HTTP client over the app's ASGI interface. Nothing in NeMo Gym is
replaced or mocked.

1. A `SimpleResourcesServer` subclass whose `verify` raises `nemo_gym.judge.JudgeError`:
   the HTTP response is judge_failsafe's row (reward 0.0, `mask_sample: true`,
   `failure_kind: judge_failed`), and our `gym.verify` span has status ERROR, `error.type` =
   `nemo_gym.judge.JudgeError`, the exception as an event, no reward, and
   `gym.rollout.rewarded_total` does not move.
2. Resources servers that take `verify` from a mixin which is no `SimpleResourcesServer`
   subclass, defined after `instrument()`: the wheel's own `SimpleWeatherResourcesServer`
   (`SimpleWeatherVerifier`, imported after `instrument()`) and one defined here. Each POST
   makes exactly one `gym.verify` span, with its reward, counted once.
3. A `SimpleResponsesAPIModel` subclass defined after `instrument()` whose `responses` calls its own
   `chat_completions`: one model-call span (`chat <model>`, kind CLIENT) with the answer's token counts.

Prints one line per check and exits 1 when any fails.
"""

# No `from __future__ import annotations`: FastAPI reads the verify signatures of the classes
# defined inside functions below, whose annotation names it could not resolve from strings.
import sys
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gym_instrument import GymInstrumentor

VERIFY_SPAN = "gym.verify"
REWARD = "nemo.gym.rollout.reward"
ROLLOUT_ID = "nemo.gym.rollout.id"
REWARDED_COUNTER = "gym.rollout.rewarded_total"
JUDGE_ERROR_TYPE = "nemo_gym.judge.JudgeError"

failures: list[str] = []


def check(condition: bool, description: str) -> None:
    print(f"  {'ok  ' if condition else 'FAIL'} {description}", flush=True)
    if not condition:
        failures.append(description)


def verify_body(rollout_id: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A verify request as an agent posts it: the task's request, the model's response, the rollout id."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "what's it like in sf?"}]},
        "response": {
            "id": "resp_e2e",
            "object": "response",
            "created_at": 0.0,
            "model": "scripted-model",
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
        "_ng_rollout_id": rollout_id,
    }


MESSAGE_OUTPUT = [
    {
        "type": "message",
        "id": "msg_e2e",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is cold.", "annotations": []}],
    }
]
TOOL_CALL_OUTPUT = [
    {
        "type": "function_call",
        "id": "fc_e2e",
        "call_id": "call_e2e",
        "name": "get_weather",
        "arguments": '{"city": "San Francisco"}',
        "status": "completed",
    }
]


class Telemetry:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def take_verify_spans(self) -> list[ReadableSpan]:
        spans = [span for span in self.exporter.get_finished_spans() if span.name == VERIFY_SPAN]
        self.exporter.clear()
        return spans

    def rewarded_total(self) -> float:
        data = self.reader.get_metrics_data()
        total = 0.0
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == REWARDED_COUNTER:
                        total += sum(point.value for point in metric.data.data_points)
        return total


def post_verify(server: Any, body: dict[str, Any]) -> Any:
    from fastapi.testclient import TestClient

    with TestClient(server.setup_webserver()) as client:
        return client.post("/verify", json=body)


def make_server(server_class: type, config_class: type, name: str) -> Any:
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    # verify needs no other server; the client is real and never called.
    server_client = ServerClient(
        head_server_config=BaseServerConfig(host="127.0.0.1", port=1), global_config_dict=OmegaConf.create({})
    )
    return server_class(config=config_class(host="127.0.0.1", port=1, entrypoint="", name=name), server_client=server_client)


def judge_failure(telemetry: Telemetry) -> None:
    print("a verify that raises nemo_gym.judge.JudgeError, through judge_failsafe:")
    from nemo_gym.base_resources_server import (
        BaseResourcesServerConfig,
        BaseVerifyRequest,
        BaseVerifyResponse,
        SimpleResourcesServer,
    )
    from nemo_gym.judge import JudgeError

    class JudgedResourcesServer(SimpleResourcesServer):
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            raise JudgeError("judge unreachable")

    before = telemetry.rewarded_total()
    response = post_verify(
        make_server(JudgedResourcesServer, BaseResourcesServerConfig, "e2e_judged"), verify_body("7-1", MESSAGE_OUTPUT)
    )
    row = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    check(response.status_code == 200, f"HTTP status is 200 (got {response.status_code})")
    check(
        row.get("reward") == 0.0 and row.get("mask_sample") is True and row.get("failure_kind") == "judge_failed",
        "the response is the failsafe's row: reward 0.0, mask_sample true, failure_kind judge_failed "
        f"(got reward={row.get('reward')!r}, mask_sample={row.get('mask_sample')!r}, failure_kind={row.get('failure_kind')!r})",
    )
    spans = telemetry.take_verify_spans()
    check(len(spans) == 1, f"exactly one `{VERIFY_SPAN}` span (got {len(spans)})")
    if spans:
        span = spans[0]
        attributes = dict(span.attributes or {})
        check(span.status.status_code == StatusCode.ERROR, f"its status is ERROR (got {span.status.status_code.name})")
        check(
            attributes.get("error.type") == JUDGE_ERROR_TYPE,
            f"error.type = {JUDGE_ERROR_TYPE} (got {attributes.get('error.type')!r})",
        )
        exception_types = [event.attributes.get("exception.type") for event in span.events if event.name == "exception"]
        check(
            len(exception_types) == 1 and str(exception_types[0]).endswith("JudgeError"),
            f"the exception is recorded as one event (exception.type: {exception_types})",
        )
        check(REWARD not in attributes, f"no {REWARD} (got {attributes.get(REWARD)!r})")
        check(attributes.get(ROLLOUT_ID) == "7-1", f"{ROLLOUT_ID} = '7-1' from the request (got {attributes.get(ROLLOUT_ID)!r})")
    after = telemetry.rewarded_total()
    check(after == before, f"{REWARDED_COUNTER} not incremented (before {before}, after {after})")


def verify_from_mixins(telemetry: Telemetry) -> None:
    from nemo_gym.base_resources_server import (
        BaseResourcesServerConfig,
        BaseVerifyRequest,
        BaseVerifyResponse,
        SimpleResourcesServer,
    )

    # Imported only now, after instrument(): its classes are defined after the patching.
    from resources_servers.example_single_tool_call.app import (
        SimpleWeatherResourcesServer,
        SimpleWeatherResourcesServerConfig,
    )

    print("the wheel's SimpleWeatherResourcesServer, whose verify comes from a mixin:")
    owner = next(cls for cls in SimpleWeatherResourcesServer.__mro__ if "verify" in vars(cls))
    check(
        owner.__name__ == "SimpleWeatherVerifier" and not issubclass(owner, SimpleResourcesServer),
        f"in the wheel's MRO, verify is defined by {owner.__qualname__}, no SimpleResourcesServer subclass "
        f"(MRO: {', '.join(cls.__name__ for cls in SimpleWeatherResourcesServer.__mro__[:4])}, ...)",
    )
    weather = make_server(SimpleWeatherResourcesServer, SimpleWeatherResourcesServerConfig, "e2e_weather")
    expect_one_verify_per_call(telemetry, weather, TOOL_CALL_OUTPUT, reward=1.0, calls=2, task=9)

    class ScoredByMixin:  # no SimpleResourcesServer subclass
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            return BaseVerifyResponse(**body.model_dump(), reward=0.5)

    class MixinResourcesServer(ScoredByMixin, SimpleResourcesServer):
        pass

    print("a resources server defined here after instrument(), verify from its mixin:")
    mixed = make_server(MixinResourcesServer, BaseResourcesServerConfig, "e2e_mixin")
    expect_one_verify_per_call(telemetry, mixed, MESSAGE_OUTPUT, reward=0.5, calls=2, task=10)


def expect_one_verify_per_call(
    telemetry: Telemetry, server: Any, output: list[dict[str, Any]], reward: float, calls: int, task: int
) -> None:
    """Each call is its own rollout (`<task>-<call>`): the counter counts a rollout id once."""
    before = telemetry.rewarded_total()
    for call in range(calls):
        response = post_verify(server, verify_body(f"{task}-{call}", output))
        check(
            response.status_code == 200 and response.json().get("reward") == reward,
            f"call {call}: HTTP 200 with reward {reward} (got {response.status_code}, {response.json().get('reward')!r})",
        )
        spans = telemetry.take_verify_spans()
        check(len(spans) == 1, f"call {call}: exactly one `{VERIFY_SPAN}` span (got {len(spans)})")
        for span in spans:
            attributes = dict(span.attributes or {})
            check(attributes.get(REWARD) == reward, f"call {call}: {REWARD} = {reward} (got {attributes.get(REWARD)!r})")
            check(
                attributes.get(ROLLOUT_ID) == f"{task}-{call}",
                f"call {call}: {ROLLOUT_ID} = '{task}-{call}' (got {attributes.get(ROLLOUT_ID)!r})",
            )
    after = telemetry.rewarded_total()
    check(after - before == calls, f"{REWARDED_COUNTER} counted {after - before} for {calls} calls")


def nested_model_call(telemetry: Telemetry) -> None:
    """A model server defined after instrument(), whose responses() converts to chat_completions()
    (as the wheel's vllm_model does): one model call, one span, with the answer's token counts."""
    import asyncio

    from nemo_gym.base_responses_api_model import BaseResponsesAPIModelConfig, SimpleResponsesAPIModel
    from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming

    class ConvertingModel(SimpleResponsesAPIModel):
        async def chat_completions(self, body: Any = None) -> Any:
            return {
                "model": "e2e-served",
                "choices": [{"finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 3},
            }

        async def responses(self, body: Any = None) -> Any:
            completion = await self.chat_completions(body)
            usage = completion["usage"]
            return {
                "model": completion["model"],
                "status": "completed",
                "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
            }

    print("a model server whose responses() calls its chat_completions():")
    server = make_server(ConvertingModel, BaseResponsesAPIModelConfig, "e2e_model")
    telemetry.exporter.clear()
    asyncio.run(server.responses(NeMoGymResponseCreateParamsNonStreaming(model="e2e-model", input="hi")))
    spans = [span for span in telemetry.exporter.get_finished_spans() if "gen_ai.operation.name" in (span.attributes or {})]
    telemetry.exporter.clear()
    check(len(spans) == 1, f"exactly one model-call span (got {len(spans)})")
    if spans:
        span = spans[0]
        attributes = dict(span.attributes or {})
        check(span.name == "chat e2e-model", f"named 'chat e2e-model' (got {span.name!r})")
        check(span.kind == SpanKind.CLIENT, f"kind CLIENT (got {span.kind.name})")
        check(
            (attributes.get("gen_ai.usage.input_tokens"), attributes.get("gen_ai.usage.output_tokens")) == (9, 3),
            f"token counts 9 / 3 (got {attributes.get('gen_ai.usage.input_tokens')!r} / "
            f"{attributes.get('gen_ai.usage.output_tokens')!r})",
        )


def main() -> int:
    telemetry = Telemetry()
    GymInstrumentor().instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider)
    steps: list[Callable[[Telemetry], None]] = [judge_failure, verify_from_mixins, nested_model_call]
    try:
        for step in steps:
            try:
                step(telemetry)
            except Exception as error:  # one broken step still lets the others report
                check(False, f"{step.__name__} raised {type(error).__qualname__}: {error}")
    finally:
        GymInstrumentor().uninstrument()
    print(f"in-process 0.7.0 checks: {len(failures)} failed" if failures else "in-process 0.7.0 checks: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
