"""Model calls and a rollout's token totals (NeMo Gym's schema): one GenAI CLIENT span per model call
made in the model server, and the dispatch span's totals read from the rollout's result, whose
body the collector reads after its POST returned. Real SDK, real wrapt, modules shaped like the
wheel's (``SimpleResponsesAPIModel``, ``ServerClient.post``, ``get_response_json``)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import time
from typing import Any

import pytest
from opentelemetry import baggage, context
from opentelemetry.trace import SpanKind, StatusCode

from gym_instrument import Target, semconv
from gym_instrument.frameworks import FRAMEWORKS

NEMO_GYM = FRAMEWORKS["nemo_gym"].schema

MODEL_SOURCE = '''
class SimpleResponsesAPIModel:
    async def responses(self, body=None):
        raise NotImplementedError

    async def chat_completions(self, body=None):
        raise NotImplementedError


class ScriptedModel(SimpleResponsesAPIModel):
    """A model server whose responses() converts to chat_completions() (as vllm_model does)."""

    def __init__(self):
        self.answers = []
        self.fail = None

    async def chat_completions(self, body=None):
        if self.fail is not None:
            raise self.fail
        answer = {
            "model": "served-model",
            "choices": [{"finish_reason": "stop", "message": {"content": "secret answer"}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4},
        }
        self.answers.append(answer)
        return answer

    async def responses(self, body=None):
        completion = await self.chat_completions(body)
        answer = {
            "model": completion["model"],
            "status": "completed",
            "output": [{"content": "secret answer"}],
            "usage": {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15},
        }
        self.answers.append(answer)
        return answer
'''

COLLECTOR_SOURCE = '''
class Response:
    """aiohttp's ClientResponse, as far as the collector uses it: a status and a body read later."""

    def __init__(self, status, body):
        self.status = status
        self._body = body

    async def read(self):
        if isinstance(self._body, BaseException):
            raise self._body  # the connection reset while the body streamed in
        return self._body


class ServerClient:
    def __init__(self, bodies, status=200):
        self.bodies = bodies
        self.status = status

    async def post(self, server_name, url_path, **kwargs):
        return Response(self.status, self.bodies.pop(0))


async def get_response_json(response):
    return await response.read()
'''


def model_targets(module: str) -> list[Target]:
    return [
        Target(f"{module}:SimpleResponsesAPIModel.responses", "model_call", row_arg="body", schema=NEMO_GYM),
        Target(f"{module}:SimpleResponsesAPIModel.chat_completions", "model_call", row_arg="body", schema=NEMO_GYM),
    ]


@pytest.fixture
def model(make_module: Any, instrument: Any) -> Any:
    def build(**settings: Any) -> Any:
        name = make_module(MODEL_SOURCE)
        instrument(targets=model_targets(name), **settings)
        return importlib.import_module(name)

    return build


def in_rollout(coroutine_function: Any, rollout_id: str = "3-1") -> Any:
    async def inside() -> Any:
        token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id))
        try:
            return await coroutine_function()
        finally:
            context.detach(token)

    return asyncio.run(inside())


def test_a_model_call_is_one_genai_client_span_named_by_operation_and_model(model: Any, telemetry: Any) -> None:
    server = model().ScriptedModel()
    answer = in_rollout(lambda: server.responses(body={"model": "policy", "input": "secret prompt"}))
    assert answer is server.answers[-1]  # the same object
    [span] = telemetry.spans()  # responses() calling chat_completions(): one model call, one span
    assert span.name == "chat policy"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "policy",
        "gen_ai.response.model": "served-model",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.response.finish_reasons": ("stop",),
        "nemo.gym.rollout.id": "3-1",
    }
    assert "secret" not in repr(dict(span.attributes))  # counts and names, never content


def test_a_chat_completion_reads_its_prompt_and_completion_tokens(model: Any, telemetry: Any) -> None:
    server = model().ScriptedModel()
    in_rollout(lambda: server.chat_completions(body={"model": "policy", "messages": []}))
    [span] = telemetry.spans()
    assert span.name == "chat policy"
    assert span.attributes["gen_ai.usage.input_tokens"] == 11
    assert span.attributes["gen_ai.usage.output_tokens"] == 4
    assert span.attributes["gen_ai.response.finish_reasons"] == ("stop",)


def test_a_request_that_names_no_model_is_named_by_its_operation(model: Any, telemetry: Any) -> None:
    server = model().ScriptedModel()
    asyncio.run(server.chat_completions(body={"messages": []}))
    [span] = telemetry.spans()
    assert span.name == "chat"
    assert "gen_ai.request.model" not in span.attributes
    assert "nemo.gym.rollout.id" not in span.attributes  # no rollout in the context


def test_a_failed_model_call_raises_the_same_exception_and_says_its_type(model: Any, telemetry: Any) -> None:
    server = model().ScriptedModel()
    server.fail = failure = ConnectionError("backend down")
    with pytest.raises(ConnectionError) as raised:
        in_rollout(lambda: server.responses(body={"model": "policy"}))
    assert raised.value is failure
    [span] = telemetry.spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ConnectionError"


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_model_calls_off_wraps_nothing(make_module: Any, instrument: Any, telemetry: Any, monkeypatch: Any, how: str) -> None:
    name = make_module(MODEL_SOURCE)
    module = importlib.import_module(name)
    original = module.SimpleResponsesAPIModel.__dict__["responses"]
    if how == "environment":
        monkeypatch.setenv("OTEL_PYTHON_GYM_MODEL_CALLS", "false")
        instrument(targets=model_targets(name))
    else:
        instrument(targets=model_targets(name), model_calls=False)
    assert module.SimpleResponsesAPIModel.__dict__["responses"] is original
    asyncio.run(module.ScriptedModel().responses(body={"model": "policy"}))
    assert telemetry.spans() == []


# -- a rollout's totals on its dispatch ---------------------------------------------------------


def collector_targets(module: str) -> list[Target]:
    return [
        Target(f"{module}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        Target(f"{module}:get_response_json", "read_result", schema=NEMO_GYM),
    ]


@pytest.fixture
def collector(make_module: Any, instrument: Any) -> Any:
    name = make_module(COLLECTOR_SOURCE)
    instrument(targets=collector_targets(name))
    return importlib.import_module(name)


ROW = {"_ng_task_index": 2, "_ng_rollout_index": 0, "agent_ref": {"name": "agent"}}
USAGE = {"input_tokens": 120, "output_tokens": 35, "total_tokens": 155}


def collect(module: Any, body: Any, status: int = 200, read: bool = True) -> Any:
    """The collector's closure: POST the row to /run, then read the response's body."""

    async def closure() -> Any:
        response = await module.ServerClient([body], status).post(server_name="agent", url_path="/run", json=ROW)
        return await module.get_response_json(response) if read else None

    return asyncio.run(closure())


def test_the_dispatch_carries_the_rollouts_token_totals_once_its_body_is_read(collector: Any, telemetry: Any) -> None:
    body = {"reward": 1.0, "response": {"usage": USAGE}, "ng_trajectory": {"model_calls": [{}, {}, {}]}}
    assert collect(collector, body) is body
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.attributes["nemo.gym.rollout.id"] == "2-0"
    assert span.attributes["gen_ai.usage.input_tokens"] == 120
    assert span.attributes["gen_ai.usage.output_tokens"] == 35
    assert span.attributes["nemo.gym.rollout.model_calls"] == 3
    assert span.status.status_code is StatusCode.UNSET


def test_the_dispatch_stays_open_until_its_body_is_read(collector: Any, telemetry: Any) -> None:
    async def closure() -> Any:
        response = await collector.ServerClient([{"response": {"usage": USAGE}}]).post(
            server_name="agent", url_path="/run", json=ROW
        )
        before = telemetry.spans("gym.rollout.dispatch")
        await collector.get_response_json(response)
        return before

    assert asyncio.run(closure()) == []
    assert len(telemetry.spans("gym.rollout.dispatch")) == 1


def test_no_model_calls_count_without_a_trajectory_that_lists_them(collector: Any, telemetry: Any) -> None:
    collect(collector, {"response": {"usage": USAGE}, "ng_trajectory": {"model_calls": []}})
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert "nemo.gym.rollout.model_calls" not in span.attributes
    assert span.attributes["gen_ai.usage.input_tokens"] == 120


def test_a_native_episodes_totals_come_from_its_result(collector: Any, telemetry: Any) -> None:
    collect(collector, {"episode_id": {"rollout_id": "2-0"}, "result": {"usage": USAGE}})
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.attributes["gen_ai.usage.output_tokens"] == 35


def test_a_failed_run_ends_at_once_with_its_status(collector: Any, telemetry: Any) -> None:
    collect(collector, {"detail": "boom"}, status=500, read=False)
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "500"
    assert "gen_ai.usage.input_tokens" not in span.attributes


def test_a_body_never_read_still_ends_its_dispatch(collector: Any, telemetry: Any) -> None:
    collect(collector, {"response": {"usage": USAGE}}, read=False)
    gc.collect()  # the response is dropped unread
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert "gen_ai.usage.input_tokens" not in span.attributes
    assert span.attributes["nemo.gym.rollout.id"] == "2-0"


class _RaisingSchema(type(NEMO_GYM)):  # type: ignore[misc]
    """A framework's schema that fails on every model call's request and answer."""

    def model_call_request(self, request: Any) -> dict[str, Any]:
        raise RuntimeError("request rules broken")

    def model_call_attributes(self, response: Any) -> dict[str, Any]:
        raise RuntimeError("answer rules broken")


def test_a_schema_that_fails_never_reaches_the_model_server(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(MODEL_SOURCE)
    schema = _RaisingSchema()
    instrument(targets=[Target(f"{name}:SimpleResponsesAPIModel.responses", "model_call", row_arg="body", schema=schema)])
    server = importlib.import_module(name).ScriptedModel()
    answer = asyncio.run(server.responses(body={"model": "policy"}))
    assert answer is server.answers[-1]
    [span] = telemetry.spans()  # the span still ends, without the attributes the schema could not give
    assert span.kind is SpanKind.CLIENT
    assert "gen_ai.usage.input_tokens" not in span.attributes


def outcomes(telemetry: Any) -> dict[str, int]:
    return {point.attributes["outcome"]: point.value for point in telemetry.metric_points("gym.rollout.dispatches")}


def test_a_deferred_dispatch_is_counted_once_by_its_outcome(collector: Any, telemetry: Any) -> None:
    collect(collector, {"response": {"usage": USAGE}})
    collect(collector, {"detail": "boom"}, status=503, read=False)
    assert outcomes(telemetry) == {"ok": 1, "error": 1}


def test_reading_a_body_that_no_dispatch_waits_for_changes_nothing(collector: Any, telemetry: Any) -> None:
    async def verify_hop() -> Any:
        response = await collector.ServerClient([{"reward": 1.0}]).post(server_name="resources", url_path="/verify", json={})
        return response, await collector.get_response_json(response)

    response, body = asyncio.run(verify_hop())
    assert body is response._body
    assert telemetry.spans() == []


# -- a deferred end: one end, whatever ends it ----------------------------------------------------


def test_a_read_that_raises_ends_its_dispatch_failed_with_the_exceptions_type(collector: Any, telemetry: Any) -> None:
    reset = ConnectionResetError("peer reset")
    with pytest.raises(ConnectionResetError) as raised:
        collect(collector, reset)
    assert raised.value is reset  # the same exception, to the collector
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ConnectionResetError"
    assert [event.attributes["exception.type"] for event in span.events] == ["ConnectionResetError"]
    assert "gen_ai.usage.input_tokens" not in span.attributes
    assert outcomes(telemetry) == {"error": 1}  # not ok
    gc.collect()  # the response collected later changes nothing
    assert len(telemetry.spans("gym.rollout.dispatch")) == 1


def test_the_users_end_extractors_run_once_when_the_body_is_read(make_module: Any, instrument: Any, telemetry: Any) -> None:
    seen: list[Any] = []

    def turns(call: Any) -> dict[str, Any]:
        seen.append(call.result)
        return {"my.turns": len(call.result["turns"])}

    name = make_module(COLLECTOR_SOURCE)
    instrument(targets=collector_targets(name), extractors={"dispatch": [turns]})
    body = {"turns": [1, 2, 3], "response": {"usage": USAGE}}
    collect(importlib.import_module(name), body)
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.attributes["my.turns"] == 3
    assert span.attributes["gen_ai.usage.input_tokens"] == 120  # the role's own rules too
    assert seen == [body]  # once, with what was read


def test_an_end_extractor_declares_a_read_rollout_failed(make_module: Any, instrument: Any, telemetry: Any) -> None:
    def failed_as_data(call: Any) -> dict[str, Any] | None:
        return {"error.type": "agent_gave_up"} if call.result.get("status") == "gave_up" else None

    name = make_module(COLLECTOR_SOURCE)
    instrument(targets=collector_targets(name), extractors={"dispatch": [failed_as_data]})
    collect(importlib.import_module(name), {"status": "gave_up"})
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.status.status_code is StatusCode.ERROR and span.attributes["error.type"] == "agent_gave_up"
    assert outcomes(telemetry) == {"error": 1}


def test_a_response_never_read_in_a_reference_cycle_ends_its_dispatch_when_the_post_returned(
    collector: Any, telemetry: Any
) -> None:
    async def post_and_drop() -> tuple[int, int]:
        before = time.time_ns()
        response = await collector.ServerClient([{"response": {"usage": USAGE}}]).post(
            server_name="agent", url_path="/run", json=ROW
        )
        returned = time.time_ns()
        response.itself = response  # a reference cycle: only the garbage collector frees it
        return before, returned

    gc.disable()  # the collection runs when this test says
    try:
        before, returned = asyncio.run(post_and_drop())
        assert telemetry.spans("gym.rollout.dispatch") == []  # not read, not collected yet
        collected_at = time.time_ns()
        gc.collect()
    finally:
        gc.enable()
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert before <= span.start_time <= span.end_time <= returned < collected_at  # the POST's duration, not the collector's
    assert span.status.status_code is StatusCode.UNSET and "gen_ai.usage.input_tokens" not in span.attributes


def test_a_body_read_twice_ends_its_dispatch_once(collector: Any, telemetry: Any) -> None:
    async def closure() -> None:
        response = await collector.ServerClient([{"response": {"usage": USAGE}}]).post(
            server_name="agent", url_path="/run", json=ROW
        )
        await collector.get_response_json(response)
        await collector.get_response_json(response)

    asyncio.run(closure())
    gc.collect()
    [span] = telemetry.spans("gym.rollout.dispatch")
    assert span.attributes["gen_ai.usage.input_tokens"] == 120
    assert outcomes(telemetry) == {"ok": 1}


# -- a dispatch that returns its rollout's result itself: its end reads only what it finds --------

ROLLOUT_LOOP = """
from pydantic import BaseModel, ConfigDict


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int


class Response(BaseModel):
    usage: Usage


class RolloutResult(BaseModel):
    model_config = ConfigDict(extra="allow")
    reward: float
    response: Response | None = None


class Plain:
    def __init__(self, **values):
        self.__dict__.update(values)


RESULTS = []


def run_rollout(row):
    return RESULTS.pop(0)
"""


@pytest.fixture
def rollout_loop(make_module: Any, instrument: Any) -> Any:
    name = make_module(ROLLOUT_LOOP)
    instrument(targets=[f"{name}:run_rollout=dispatch@nemo_gym"])  # as a user names it
    return importlib.import_module(name)


def test_a_dispatch_whose_result_has_no_totals_reads_none_of_their_fields(
    rollout_loop: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym_instrument.frameworks.nemo_gym import schema

    results = [{"reward": 1.0, "_ng_task_index": 0}, rollout_loop.RolloutResult(reward=0.5), rollout_loop.Plain(reward=0.0)]
    read: list[Any] = []
    field = schema.field

    def reading(value: Any, name: str) -> Any:  # what the schema's end reads, of the result or below it
        if any(value is result for result in results) or value is schema.MISSING:
            read.append(name)
        return field(value, name)

    monkeypatch.setattr(schema, "field", reading)
    rollout_loop.RESULTS.extend(results)
    for task in range(3):
        assert rollout_loop.run_rollout({"_ng_task_index": task, "_ng_rollout_index": 0}) is results[task]
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert [span.attributes[semconv.ROLLOUT_ID] for span in spans] == ["0-0", "1-0", "2-0"]
    assert not [span for span in spans if semconv.GEN_AI_INPUT_TOKENS in span.attributes]
    assert read == []


def test_a_dispatch_whose_result_carries_totals_gets_them_whatever_the_result_is(rollout_loop: Any, telemetry: Any) -> None:
    usage = {"input_tokens": 120, "output_tokens": 35}
    trajectory = {"model_calls": [{}, {}]}
    rollout_loop.RESULTS.extend(
        [
            {"reward": 1.0, "response": {"usage": usage}, "ng_trajectory": trajectory},
            rollout_loop.RolloutResult(reward=1.0, response={"usage": usage}, ng_trajectory=trajectory),  # an extra
            rollout_loop.Plain(reward=1.0, result={"usage": usage, "ng_trajectory": trajectory}),  # a native episode's
        ]
    )
    for task in range(3):
        rollout_loop.run_rollout({"_ng_task_index": task, "_ng_rollout_index": 0})
    totals = [
        {name: value for name, value in span.attributes.items() if name.startswith(("gen_ai.", "nemo.gym.rollout.model"))}
        for span in telemetry.spans(semconv.SPAN_DISPATCH)
    ]
    expected = {semconv.GEN_AI_INPUT_TOKENS: 120, semconv.GEN_AI_OUTPUT_TOKENS: 35, semconv.ROLLOUT_MODEL_CALLS: 2}
    assert totals == [expected] * 3
