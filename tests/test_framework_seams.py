"""NeMo Gym 0.7.0's seams as the roles meet them: the environment server's relay of ``/run``,
Gym's own ``gym.verify`` span around ``/verify``, and ``judge_failsafe`` turning a judge's
exception into a reward-0.0 row. Each runs through both the defaults-only and the extractor path.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from opentelemetry import baggage, context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags
from pydantic import BaseModel

from gym_instrument import semconv
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM

# A user extractor sends every call through the general path; none keeps the role's defaults only.
PATHS = pytest.mark.parametrize("extractors", [(), (lambda call: {"test.extra": True},)], ids=["defaults", "extractors"])

RELAY_SOURCE = '''
import asyncio


class ServerClient:
    """NeMo Gym's client: every internal POST, /run among them."""

    async def post(self, server_name, url_path, **kwargs):
        await asyncio.sleep(0)
        if url_path == "/run" and (kwargs.get("json") or {}).get("relay_through"):
            # the collector's /run reaches an environment server, which relays it to the agent
            return await LegacyAgentEnvironmentServer(ServerClient()).run_legacy(b'{"relayed": true}')
        return {"server": server_name, "path": url_path, "json": kwargs.get("json"), "data": kwargs.get("data")}


class LegacyAgentEnvironmentServer:
    """Relays /run to its agent as bytes, reading neither side's contract (as 0.7.0's legacy_agent)."""

    def __init__(self, client):
        self.client = client

    async def run_legacy(self, body):
        return await self.client.post(server_name="agent", url_path="/run", data=body)
'''


@pytest.fixture
def relay(make_module: Any, instrument: Any) -> Callable[[tuple[Any, ...]], Any]:
    def build(extractors: tuple[Any, ...]) -> Any:
        from gym_instrument import Target

        name = make_module(RELAY_SOURCE)
        instrument(
            targets=[Target(f"{name}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM)],
            extractors={"dispatch": list(extractors)},
        )
        return importlib.import_module(name)

    return build


ROW = {"task_id": "mcqa-7", "_ng_task_index": 7, "_ng_rollout_index": 1, "relay_through": True}


@PATHS
def test_a_relay_inside_a_dispatch_is_not_a_second_dispatch(relay: Any, telemetry: Any, extractors: Any) -> None:
    module = relay(extractors)
    result = asyncio.run(module.ServerClient().post("env", "/run", json=dict(ROW)))
    assert result == {"server": "agent", "path": "/run", "json": None, "data": b'{"relayed": true}'}
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.attributes[semconv.TASK_ID] == "mcqa-7" and span.attributes[semconv.ROLLOUT_ID] == "7-1"
    assert telemetry.metric_total(semconv.METRIC_DISPATCHES) == 1


def incoming_request_context(rollout_id: str | None) -> context.Context:
    """The context a server's request handler runs in: the caller's traceparent and baggage."""
    remote = SpanContext(0x5CE0E9A56015FEC5AADFA328AE398115, 0xAB54A98CEB1F0AD2, is_remote=True, trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(remote))
    return ctx if rollout_id is None else baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id, ctx)


@PATHS
def test_a_relay_in_another_process_passes_through_in_the_callers_trace(relay: Any, telemetry: Any, extractors: Any) -> None:
    module = relay(extractors)
    tracer = telemetry.tracer_provider.get_tracer("a server instrumentation")

    async def serve() -> Any:
        # the environment server's request, as FastAPI's instrumentation starts it from the headers
        context.attach(incoming_request_context("7-1"))  # the task's own context copy: not detached
        with tracer.start_as_current_span("POST /run") as server_span:
            result = await module.LegacyAgentEnvironmentServer(module.ServerClient()).run_legacy(b"{}")
            return result, trace.get_current_span(), server_span

    result, current, server_span = asyncio.run(serve())
    assert result["data"] == b"{}"
    assert current is server_span  # the relay ran in the request's own context: its HTTP client span continues the trace
    assert telemetry.spans(semconv.SPAN_DISPATCH) == []
    assert telemetry.metric_points(semconv.METRIC_DISPATCHES) == []


@PATHS
def test_a_row_less_dispatch_outside_any_rollout_is_still_traced(relay: Any, telemetry: Any, extractors: Any) -> None:
    module = relay(extractors)
    token = context.attach(incoming_request_context(None))
    try:
        asyncio.run(module.ServerClient().post("agent", "/run", data=b"{}"))
    finally:
        context.detach(token)
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)  # a dispatch whose row cannot be read, not a relay
    assert semconv.ROLLOUT_ID not in span.attributes
    assert telemetry.metric_total(semconv.METRIC_DISPATCHES) == 1


# -- NeMo Gym 0.7.0's /verify: traced_verify_endpoint(judge_failsafe(self.verify)) ---------------


SERVER_SOURCE = """
class SimpleResourcesServer:
    async def verify(self, body):
        raise NotImplementedError
"""


class JudgeError(Exception):
    """As nemo_gym.judge.JudgeError: the judge model failed."""


class VerifyRequest(BaseModel):
    answer: str


def judge_failsafe(verify_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Faithful stand-in of nemo_gym.judge.judge_failsafe (0.7.0)."""

    @functools.wraps(verify_fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await verify_fn(*args, **kwargs)
        except JudgeError as error:
            data = kwargs["body"].model_dump() | {
                "reward": 0.0,
                "mask_sample": True,
                "failure_kind": "judge_failed",
                "failure_reason": str(error)[:2000],
                "_ng_failure_class": "judge_failed",
            }
            return JSONResponse(content=jsonable_encoder(data))

    return wrapper


def traced_verify_endpoint(handler: Callable[..., Any], static_attributes: dict[str, Any], tracer: Any) -> Callable[..., Any]:
    """Faithful stand-in of nemo_gym.telemetry.endpoints.traced_verify_endpoint (0.7.0) with its span
    group on: the handler inside a span named gym.verify carrying nemo.gym.server.name, made by Gym's
    own tracer (under the launcher Gym's provider is refused, so it is the launcher's provider)."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with tracer.start_as_current_span("gym.verify", attributes=dict(static_attributes)):
            return await handler(*args, **kwargs)

    return wrapper


@pytest.fixture
def verify_app(make_module: Any, instrument: Any, telemetry: Any) -> Callable[..., TestClient]:
    def build(
        extractors: tuple[Any, ...], gym_telemetry: bool, outcome: str, gym_attributes: dict[str, Any] | None = None
    ) -> TestClient:
        name = make_module(SERVER_SOURCE)
        instrument(targets=[f"{name}:SimpleResourcesServer.verify=verify@nemo_gym"], extractors={"verify": list(extractors)})
        module = importlib.import_module(name)

        class McqaServer(module.SimpleResourcesServer):  # the server's app.py, defined after instrumenting
            async def verify(self, body: VerifyRequest) -> dict[str, Any]:
                if outcome == "judge_error":
                    raise JudgeError("judge model returned no verdict")
                if outcome == "crash":
                    raise RuntimeError("verifier bug")
                return {"reward": 1.0 if body.answer == "B" else 0.0}

        server = McqaServer()
        endpoint = judge_failsafe(server.verify)
        if gym_telemetry:
            endpoint = traced_verify_endpoint(
                endpoint,
                {"nemo.gym.server.name": "mcqa", **(gym_attributes or {})},
                telemetry.tracer_provider.get_tracer("nemo.lens"),
            )
        app = FastAPI()
        app.post("/verify")(endpoint)
        return TestClient(app, raise_server_exceptions=False)

    return build


@PATHS
def test_without_gym_telemetry_our_verify_span_carries_the_reward(verify_app: Any, telemetry: Any, extractors: Any) -> None:
    response = verify_app(extractors, gym_telemetry=False, outcome="ok").post("/verify", json={"answer": "B"})
    assert response.json() == {"reward": 1.0}
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.instrumentation_scope.name == semconv.INSTRUMENTATION_NAME
    assert span.attributes[semconv.ROLLOUT_REWARD] == 1.0
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 1


@PATHS
def test_with_gym_telemetry_our_attributes_go_on_gyms_own_verify_span(verify_app: Any, telemetry: Any, extractors: Any) -> None:
    client = verify_app(extractors, gym_telemetry=True, outcome="ok")
    assert client.post("/verify", json={"answer": "B"}).json() == {"reward": 1.0}
    assert client.post("/verify", json={"answer": "C"}).json() == {"reward": 0.0}
    spans = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(spans) == 2  # one gym.verify per verify, not Gym's and ours below it
    for span, reward in zip(spans, (1.0, 0.0), strict=True):
        assert span.instrumentation_scope.name == "nemo.lens"
        assert span.attributes["nemo.gym.server.name"] == "mcqa"
        assert span.attributes[semconv.ROLLOUT_REWARD] == reward
        assert span.status.status_code is StatusCode.UNSET
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 2


@PATHS
@pytest.mark.parametrize("gym_telemetry", [False, True], ids=["gym-telemetry-off", "gym-telemetry-on"])
def test_a_judge_failure_is_an_error_with_no_reward(
    verify_app: Any, telemetry: Any, extractors: Any, gym_telemetry: bool
) -> None:
    response = verify_app(extractors, gym_telemetry=gym_telemetry, outcome="judge_error").post("/verify", json={"answer": "B"})
    row = response.json()
    assert (row["reward"], row["mask_sample"], row["_ng_failure_class"]) == (0.0, True, "judge_failed")  # the failsafe's row
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[semconv.ERROR_TYPE] == f"{__name__}.JudgeError"
    assert semconv.ROLLOUT_REWARD not in span.attributes  # the 0.0 is the failsafe's, not a score
    assert telemetry.metric_points(semconv.METRIC_REWARDED) == []
    events = [event.name for event in span.events]
    # Our own span records the exception; Gym's span is Gym's to record on (the failsafe caught it).
    assert events == ([] if gym_telemetry else ["exception"])


@PATHS
def test_an_exception_through_gyms_span_is_recorded_once(verify_app: Any, telemetry: Any, extractors: Any) -> None:
    response = verify_app(extractors, gym_telemetry=True, outcome="crash").post("/verify", json={"answer": "B"})
    assert response.status_code == 500
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert [event.name for event in span.events] == ["exception"]  # Gym's own, not a second one of ours
    assert span.attributes[semconv.ERROR_TYPE] == "RuntimeError"
    assert span.status.status_code is StatusCode.ERROR


def test_an_attribute_gym_already_set_on_its_span_is_kept_and_the_difference_logged_once(
    verify_app: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Newer Gym stamps nemo.gym.task.id with its task *index*; a user's extractor says the task id.
    client = verify_app(
        (lambda call: {semconv.TASK_ID: "mcqa-7"},),
        gym_telemetry=True,
        outcome="ok",
        gym_attributes={semconv.TASK_ID: "7"},
    )
    with caplog.at_level(logging.INFO, logger="gym_instrument"):
        for answer in ("B", "C"):
            client.post("/verify", json={"answer": answer})
    spans = telemetry.spans(semconv.SPAN_VERIFY)
    assert [span.attributes[semconv.TASK_ID] for span in spans] == ["7", "7"]  # Gym's, not overwritten
    assert [span.attributes[semconv.ROLLOUT_REWARD] for span in spans] == [1.0, 0.0]  # ours beside them
    kept = [record for record in caplog.records if semconv.TASK_ID in record.getMessage()]
    assert len(kept) == 1, [record.getMessage() for record in caplog.records]  # once, not per call
    message = kept[0].getMessage()
    assert "gym.verify" in message and "kept" in message
    assert "mcqa-7" not in message  # values are row content: never logged


@PATHS
def test_a_row_less_run_of_nemo_gyms_own_target_is_a_relay_without_any_propagated_context(
    make_module: Any, instrument: Any, telemetry: Any, extractors: Any
) -> None:
    """0.7.0's environment server relays /run as bytes: with no context propagated at all (no contrib,
    the package's propagation off), the preset's target still makes no second dispatch of it."""
    from gym_instrument import Target
    from gym_instrument.frameworks import FRAMEWORKS

    name = make_module(RELAY_SOURCE)
    schema = FRAMEWORKS["nemo_gym"].schema
    target = Target(
        f"{name}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=schema, framework="nemo_gym"
    )
    instrument(targets=[target], extractors={"dispatch": list(extractors)}, propagation=False)
    module = importlib.import_module(name)
    result = asyncio.run(module.LegacyAgentEnvironmentServer(module.ServerClient()).run_legacy(b"{}"))
    assert result["data"] == b"{}"
    assert telemetry.spans(semconv.SPAN_DISPATCH) == []
    asyncio.run(module.ServerClient().post("env", "/run", json={"_ng_task_index": 0, "_ng_rollout_index": 0}))
    assert [span.attributes[semconv.ROLLOUT_ID] for span in telemetry.spans(semconv.SPAN_DISPATCH)] == ["0-0"]
