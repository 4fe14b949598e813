"""Span behaviour of each role for every kind of function and every exit path."""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

import gym_instrument
from gym_instrument import semconv
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA

KINDS_SOURCE = """
import asyncio
import contextlib

seen_baggage = []


def sync_dispatch(row):
    seen_baggage.append(_current_rollout_id())
    if row.get("fail"):
        raise ValueError("bad row")
    return {"done": row}


async def async_dispatch(row):
    await asyncio.sleep(0)
    seen_baggage.append(_current_rollout_id())
    if row.get("fail"):
        raise ValueError("bad row")
    if row.get("hang"):
        await asyncio.sleep(3600)
    return {"done": row}


def gen_dispatch(row):
    seen_baggage.append(_current_rollout_id())
    received = yield 1
    seen_baggage.append(_current_rollout_id())
    if row.get("fail"):
        raise ValueError("bad row")
    yield received
    return "finished"


async def agen_dispatch(row):
    seen_baggage.append(_current_rollout_id())
    yield 1
    await asyncio.sleep(0)
    if row.get("fail"):
        raise ValueError("bad row")
    yield 2


@contextlib.asynccontextmanager
async def acm_dispatch(row):
    await asyncio.sleep(0)
    seen_baggage.append(_current_rollout_id())
    if row.get("fail_on_enter"):
        raise ValueError("bad row")
    yield {"entered": row}
    seen_baggage.append(_current_rollout_id())
    if row.get("fail_on_exit"):
        raise KeyError("cleanup failed")


@contextlib.asynccontextmanager
async def forgiving_dispatch(row):
    try:
        yield "entered"
    except ValueError:
        pass  # swallows what the body raised


class Holder:
    @classmethod
    def class_dispatch(cls, row):
        return (cls.__name__, row)

    @staticmethod
    def static_dispatch(row):
        return ("static", row)

    def method_dispatch(self, row):
        return (self, row)


def _current_rollout_id():
    from opentelemetry import baggage
    return baggage.get_baggage("nemo.gym.rollout.id")
"""

ROW = {"_ng_task_index": 2, "_ng_rollout_index": 1}


@pytest.fixture
def kinds(make_module: Any, instrument: Any) -> Any:
    name = make_module(KINDS_SOURCE)
    instrument(
        targets=[
            f"{name}:{function}=dispatch@nemo_gym"
            for function in (
                "sync_dispatch",
                "async_dispatch",
                "gen_dispatch",
                "agen_dispatch",
                "acm_dispatch",
                "forgiving_dispatch",
                "Holder.class_dispatch",
                "Holder.static_dispatch",
                "Holder.method_dispatch",
            )
        ]
    )
    return importlib.import_module(name)


def only_dispatch(telemetry: Any) -> Any:
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    return span


def assert_error(span: Any, error_type: str) -> None:
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[semconv.ERROR_TYPE] == error_type


# -- sync and async functions ---------------------------------------------------------------


def test_sync_returns_the_same_object_with_baggage_inside(kinds: Any, telemetry: Any) -> None:
    row = dict(ROW)
    result = kinds.sync_dispatch(row)
    assert result["done"] is row
    assert kinds.seen_baggage == ["2-1"]
    assert baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID) is None  # detached afterwards
    span = only_dispatch(telemetry)
    assert span.attributes[semconv.ROLLOUT_ID] == "2-1"
    assert span.status.status_code is StatusCode.UNSET


def test_sync_raises_the_same_exception(kinds: Any, telemetry: Any) -> None:
    with pytest.raises(ValueError, match="bad row") as raised:
        kinds.sync_dispatch({**ROW, "fail": True})
    span = only_dispatch(telemetry)
    assert_error(span, "ValueError")
    (event,) = span.events
    assert event.name == "exception"
    assert raised.value.__traceback__ is not None
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_same_exception_object(kinds: Any) -> None:
    class Marker(Exception):
        pass

    marker = Marker()

    @gym_instrument.dispatch
    def failing(row: Any) -> None:
        raise marker

    with pytest.raises(Marker) as raised:
        failing(ROW)
    assert raised.value is marker


async def test_async_returns_the_same_object(kinds: Any, telemetry: Any) -> None:
    row = dict(ROW)
    result = await kinds.async_dispatch(row)
    assert result["done"] is row
    assert kinds.seen_baggage == ["2-1"]
    assert only_dispatch(telemetry).end_time is not None


async def test_async_raise(kinds: Any, telemetry: Any) -> None:
    with pytest.raises(ValueError):
        await kinds.async_dispatch({**ROW, "fail": True})
    assert_error(only_dispatch(telemetry), "ValueError")


async def test_async_cancelled(kinds: Any, telemetry: Any) -> None:
    task = asyncio.ensure_future(kinds.async_dispatch({**ROW, "hang": True}))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_error(only_dispatch(telemetry), "cancelled")


async def test_coroutine_never_awaited_leaves_no_span(kinds: Any, telemetry: Any) -> None:
    coroutine = kinds.async_dispatch(dict(ROW))
    coroutine.close()
    assert telemetry.spans() == []


async def test_concurrent_async_dispatches_keep_their_own_baggage(kinds: Any, telemetry: Any) -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0} for t in range(50)]
    await asyncio.gather(*(kinds.async_dispatch(row) for row in rows))
    assert sorted(kinds.seen_baggage) == sorted(f"{t}-0" for t in range(50))
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 50


# -- generators --------------------------------------------------------------------------------


def test_generator_exhausted(kinds: Any, telemetry: Any) -> None:
    generator = kinds.gen_dispatch(dict(ROW))
    assert telemetry.spans() == []  # not started until iterated
    assert next(generator) == 1
    assert baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID) is None  # not current in the consumer
    assert generator.send("sent") == "sent"
    with pytest.raises(StopIteration) as stop:
        next(generator)
    assert stop.value.value == "finished"
    assert kinds.seen_baggage == ["2-1", "2-1"]
    span = only_dispatch(telemetry)
    assert span.status.status_code is StatusCode.UNSET


def test_generator_raises(kinds: Any, telemetry: Any) -> None:
    generator = kinds.gen_dispatch({**ROW, "fail": True})
    next(generator)
    with pytest.raises(ValueError):
        next(generator)
    assert_error(only_dispatch(telemetry), "ValueError")


def test_generator_throw_is_delivered(kinds: Any, telemetry: Any) -> None:
    generator = kinds.gen_dispatch(dict(ROW))
    next(generator)
    with pytest.raises(KeyError):
        generator.throw(KeyError("from consumer"))
    assert_error(only_dispatch(telemetry), "KeyError")


def test_generator_closed(kinds: Any, telemetry: Any) -> None:
    generator = kinds.gen_dispatch(dict(ROW))
    next(generator)
    generator.close()
    assert_error(only_dispatch(telemetry), "cancelled")


def test_generator_abandoned(kinds: Any, telemetry: Any) -> None:
    generator = kinds.gen_dispatch(dict(ROW))
    next(generator)
    del generator
    gc.collect()
    assert_error(only_dispatch(telemetry), "cancelled")
    assert baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID) is None


async def test_async_generator_exhausted(kinds: Any, telemetry: Any) -> None:
    items = [item async for item in kinds.agen_dispatch(dict(ROW))]
    assert items == [1, 2]
    assert only_dispatch(telemetry).status.status_code is StatusCode.UNSET


async def test_async_generator_raises(kinds: Any, telemetry: Any) -> None:
    with pytest.raises(ValueError):
        async for _ in kinds.agen_dispatch({**ROW, "fail": True}):
            pass
    assert_error(only_dispatch(telemetry), "ValueError")


async def test_async_generator_closed(kinds: Any, telemetry: Any) -> None:
    generator = kinds.agen_dispatch(dict(ROW))
    assert await generator.__anext__() == 1
    await generator.aclose()
    assert_error(only_dispatch(telemetry), "cancelled")


# -- async context managers: the span covers the body of the async with ---------------------


async def test_async_context_manager_span_covers_the_body(kinds: Any, telemetry: Any) -> None:
    tracer = telemetry.tracer_provider.get_tracer("body")
    manager = kinds.acm_dispatch(dict(ROW))
    assert telemetry.spans() == []  # made, not entered: nothing yet
    async with manager as entered:
        assert entered == {"entered": ROW}
        with tracer.start_as_current_span("model call"):
            await asyncio.sleep(0)
        assert baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID) == "2-1"  # current in the body
        assert telemetry.spans(semconv.SPAN_DISPATCH) == []  # still open while the body runs
    assert baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID) is None  # detached where it was attached
    dispatch = only_dispatch(telemetry)
    (model_call,) = telemetry.spans("model call")
    assert model_call.parent.span_id == dispatch.context.span_id
    assert dispatch.start_time <= model_call.start_time and model_call.end_time <= dispatch.end_time
    assert dispatch.status.status_code is StatusCode.UNSET
    assert dispatch.attributes[semconv.ROLLOUT_ID] == "2-1"
    assert kinds.seen_baggage == ["2-1", "2-1"]  # the manager's own code runs in the span too


async def test_async_context_manager_body_raises_the_same_exception(kinds: Any, telemetry: Any) -> None:
    error = RuntimeError("the model went away")
    with pytest.raises(RuntimeError) as raised:
        async with kinds.acm_dispatch(dict(ROW)):
            raise error
    assert raised.value is error
    assert_error(only_dispatch(telemetry), "RuntimeError")


async def test_async_context_manager_enter_and_exit_failures(kinds: Any, telemetry: Any) -> None:
    with pytest.raises(ValueError):
        async with kinds.acm_dispatch({**ROW, "fail_on_enter": True}):
            pytest.fail("the body must not run")
    assert_error(only_dispatch(telemetry), "ValueError")
    telemetry.clear()
    with pytest.raises(KeyError):
        async with kinds.acm_dispatch({**ROW, "fail_on_exit": True}):
            pass
    assert_error(only_dispatch(telemetry), "KeyError")


async def test_async_context_manager_cancelled_in_the_body(kinds: Any, telemetry: Any) -> None:
    async def rollout() -> None:
        async with kinds.acm_dispatch(dict(ROW)):
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(rollout())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_error(only_dispatch(telemetry), "cancelled")


async def test_async_context_manager_that_suppresses_is_a_success(kinds: Any, telemetry: Any) -> None:
    async with kinds.forgiving_dispatch(dict(ROW)) as entered:
        assert entered == "entered"
        raise ValueError("swallowed by the manager")
    assert only_dispatch(telemetry).status.status_code is StatusCode.UNSET


# -- methods ---------------------------------------------------------------------------------


def test_classmethod_staticmethod_and_method(kinds: Any, telemetry: Any) -> None:
    holder = kinds.Holder()
    assert kinds.Holder.class_dispatch(ROW) == ("Holder", ROW)
    assert holder.class_dispatch(ROW) == ("Holder", ROW)
    assert kinds.Holder.static_dispatch(ROW) == ("static", ROW)
    assert holder.static_dispatch(ROW) == ("static", ROW)
    assert holder.method_dispatch(ROW) == (holder, ROW)
    assert kinds.Holder.method_dispatch(holder, ROW) == (holder, ROW)
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert len(spans) == 6
    assert all(span.attributes[semconv.ROLLOUT_ID] == "2-1" for span in spans)


def test_extractor_arguments_bind_self_and_cls(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """``call.arguments`` names every argument by its parameter, the instance included (wrapt passes
    it apart: binding the rest alone would shift every name by one)."""
    seen: list[dict[str, Any]] = []
    name = make_module(KINDS_SOURCE)
    instrument(
        targets=[
            f"{name}:Holder.{function}=dispatch@nemo_gym" for function in ("method_dispatch", "class_dispatch", "static_dispatch")
        ],
        extractors={"dispatch": [lambda call: seen.append(call.arguments)]},
    )
    module = importlib.import_module(name)
    holder = module.Holder()
    holder.method_dispatch(ROW)
    module.Holder.method_dispatch(holder, ROW)
    module.Holder.class_dispatch(ROW)
    holder.static_dispatch(ROW)
    assert seen == [{"self": holder, "row": ROW}, {"self": holder, "row": ROW}, {"cls": module.Holder, "row": ROW}, {"row": ROW}]
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 4


# -- when nothing records -----------------------------------------------------------------------


def test_suppressed_instrumentation_extracts_nothing(kinds: Any, telemetry: Any) -> None:
    calls: list[Any] = []

    @gym_instrument.dispatch(extractors=[lambda call: calls.append(call)])
    def dispatch(row: Any) -> Any:
        return row

    with suppress_instrumentation():
        assert dispatch(ROW) is ROW
        kinds.sync_dispatch(dict(ROW))
    assert telemetry.spans() == []
    assert calls == []
    assert kinds.seen_baggage == [None]


def test_no_sdk_extracts_nothing(make_module: Any, instrument: Any, telemetry: Any) -> None:
    calls: list[Any] = []
    name = make_module(KINDS_SOURCE)
    instrument(
        tracer_provider=trace.NoOpTracerProvider(),
        targets=[f"{name}:sync_dispatch=dispatch@nemo_gym"],
        extractors={"dispatch": [gym_instrument.at_start(lambda call: calls.append(call))]},
    )
    module = importlib.import_module(name)
    row = dict(ROW)
    assert module.sync_dispatch(row)["done"] is row
    assert calls == []
    assert module.seen_baggage == [None]


def test_sampled_out_span_runs_no_end_extractors(make_module: Any, instrument: Any, telemetry: Any) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(telemetry.exporter))
    ended: list[Any] = []
    name = make_module(KINDS_SOURCE)
    instrument(
        tracer_provider=provider,
        targets=[f"{name}:sync_dispatch=dispatch@nemo_gym"],
        extractors={"dispatch": [lambda call: ended.append(call)]},
    )
    module = importlib.import_module(name)
    assert module.sync_dispatch(dict(ROW))["done"] == ROW
    assert ended == []
    assert telemetry.spans() == []


# -- extractors ------------------------------------------------------------------------------


def test_raising_extractor_is_logged_once_and_the_span_still_exports(
    kinds: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(call: Any) -> dict[str, Any]:
        raise RuntimeError("extractor bug")

    @gym_instrument.dispatch(extractors=[broken, gym_instrument.at_start(broken)], schema=SCHEMA)
    def dispatch(row: Any) -> Any:
        return row

    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for _ in range(3):
            assert dispatch(ROW) is ROW
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert len(spans) == 3
    assert all(span.attributes[semconv.ROLLOUT_ID] == "2-1" for span in spans)
    assert len([r for r in caplog.records if "broken" in r.getMessage()]) == 1


def test_extractor_sees_the_call_and_its_result(kinds: Any, telemetry: Any) -> None:
    seen: dict[str, Any] = {}

    def outcome(call: gym_instrument.Call) -> dict[str, Any]:
        seen.update(row=call.row, result=call.result, arguments=call.arguments, exception=call.exception)
        return {"my.outcome": "ok" if call.exception is None else "failed", "my.junk": object(), "my.big": 2**70}

    @gym_instrument.dispatch(extractors=[outcome])
    def dispatch(row: Any, *, attempt: int = 0) -> Any:
        return "result"

    dispatch(ROW, attempt=3)
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert seen == {"row": ROW, "result": "result", "arguments": {"row": ROW, "attempt": 3}, "exception": None}
    assert span.attributes["my.outcome"] == "ok"
    assert "my.junk" not in span.attributes and "my.big" not in span.attributes


def test_extractors_replace_the_defaults(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(KINDS_SOURCE)
    instrument(
        targets=[f"{name}:sync_dispatch=dispatch@nemo_gym"],
        extractors={"dispatch": [gym_instrument.at_start(lambda call: {"only.mine": call.row["_ng_task_index"]})]},
        replace_default_extractors=["dispatch"],
    )
    importlib.import_module(name).sync_dispatch(dict(ROW))
    assert dict(only_dispatch(telemetry).attributes) == {"only.mine": 2}


def test_per_target_extractors(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(KINDS_SOURCE)
    instrument(
        targets=[
            gym_instrument.Target(
                f"{name}:sync_dispatch", "dispatch", extractors=(lambda call: {"which": "sync"},), schema=SCHEMA
            ),
            gym_instrument.Target(f"{name}:Holder.static_dispatch", "dispatch", default_extractors=False, schema=SCHEMA),
        ]
    )
    module = importlib.import_module(name)
    module.sync_dispatch(dict(ROW))
    module.Holder.static_dispatch(dict(ROW))
    sync_span, static_span = telemetry.spans(semconv.SPAN_DISPATCH)
    assert sync_span.attributes["which"] == "sync" and sync_span.attributes[semconv.ROLLOUT_ID] == "2-1"
    assert dict(static_span.attributes) == {}


# -- baggage switch ---------------------------------------------------------------------------


def test_baggage_off_keeps_the_id_in_process(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module()
    instrument(
        targets=[f"{name}:Agent.run=dispatch@nemo_gym", f"{name}:SimpleResourcesServer.verify=verify@nemo_gym"], baggage=False
    )
    module = importlib.import_module(name)
    seen: list[Any] = []

    class Server(module.McqaResourcesServer):
        async def verify(self, body: Any) -> Any:
            seen.append(baggage.get_all())
            return await super().verify(body)

    asyncio.run(module.Agent(Server()).run({"_ng_task_index": 1, "_ng_rollout_index": 0, "result": {"reward": 0.5}}))
    assert seen == [{}]  # nothing a propagator would write into outgoing headers
    (verify_span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert verify_span.attributes[semconv.ROLLOUT_ID] == "1-0"  # in-process verify still names it
    assert verify_span.attributes[semconv.ROLLOUT_REWARD] == 0.5


def test_dispatch_parents_follow_the_callers_context(kinds: Any, telemetry: Any) -> None:
    tracer = telemetry.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("collection") as parent:
        kinds.sync_dispatch(dict(ROW))
    span = only_dispatch(telemetry)
    assert span.parent.span_id == parent.get_span_context().span_id
    assert context.get_current() == context.get_current()  # nothing left attached


# -- isolate: a request boundary ----------------------------------------------------------------


def test_isolate_runs_the_call_in_an_empty_context(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """A request started inside a previous request's context (uvicorn keep-alive) starts clean."""
    name = make_module(
        "from opentelemetry import baggage, trace\n\n"
        "class Cycle:\n"
        "    async def run_asgi(self, app):\n"
        "        return trace.get_current_span(), baggage.get_all(), await app()\n"
    )
    module = importlib.import_module(name)
    instrument(targets=[f"{name}:Cycle.run_asgi=isolate", f"{name}:Cycle.run_asgi=isolate"])

    @gym_instrument.verify
    async def verify(body: Any) -> Any:
        return {"reward": 1.0}

    async def app() -> Any:
        return await verify({})

    async def previous_request() -> Any:
        tracer = telemetry.tracer_provider.get_tracer("previous")
        with tracer.start_as_current_span("POST /verify"):
            token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "0-0"))
            try:
                # the leaked context: a verify of the previous request is running in it
                @gym_instrument.verify
                async def leaking(body: Any) -> Any:
                    return await module.Cycle().run_asgi(app)

                return await leaking({})
            finally:
                context.detach(token)

    current_span, current_baggage, result = asyncio.run(previous_request())
    assert current_span is trace.INVALID_SPAN and current_baggage == {}
    assert result == {"reward": 1.0}
    inner = [span for span in telemetry.spans(semconv.SPAN_VERIFY) if span.parent is None]
    assert len(inner) == 1  # the inner verify is traced, as a root, with no leaked rollout id
    assert semconv.ROLLOUT_ID not in inner[0].attributes
    assert inner[0].attributes[semconv.ROLLOUT_REWARD] == 1.0


# -- a new role: one class and one line in the table ---------------------------------------


def test_a_new_role_is_one_class_and_one_table_line(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role the package does not ship (a judge call that counts as a verify): the class and its
    line in ROLES are all it takes for targets, spans, the schema's rules and the reward count."""
    from gym_instrument.role import ROLES, VerifyRole

    class JudgeRole(VerifyRole):
        name = "judge"
        span_name = "gym.judge"
        row_names = ("prompt",)

    monkeypatch.setitem(ROLES, JudgeRole.name, JudgeRole())
    name = make_module("def ask_judge(prompt):\n    return {'reward': 0.25}\n")
    instrument(targets=[f"{name}:ask_judge=judge"])
    module = importlib.import_module(name)
    token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "4-1"))
    try:
        assert module.ask_judge({"question": "?"}) == {"reward": 0.25}
    finally:
        context.detach(token)
    (span,) = telemetry.spans("gym.judge")
    assert dict(span.attributes) == {semconv.ROLLOUT_ID: "4-1", semconv.ROLLOUT_REWARD: 0.25}
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 1


def test_a_role_added_later_gets_its_span_kind_its_open_span_and_its_decorator(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two unshipped roles registered after import: one asks for a CLIENT span by its class
    attribute, one opens its span itself. Targets of both get their spans of their kind, in the
    default setup (no job context), and ``gym_instrument.<name>`` is each one's decorator."""
    from opentelemetry.trace import SpanKind

    from gym_instrument.role import ROLES, Role

    class ToolRole(Role):
        name = "tool"
        span_name = "gym.tool"
        span_kind = SpanKind.CLIENT

    class GradeRole(Role):
        name = "grade"
        span_name = "gym.grade"

        def open_span(self, call: Any, tracer: Any, job: Any, current: Any, attributes: dict[str, Any]) -> Any:
            return tracer.start_span("gym.grade", context=current, kind=SpanKind.PRODUCER, attributes={"graded": True})

    monkeypatch.setitem(ROLES, ToolRole.name, ToolRole())
    monkeypatch.setitem(ROLES, GradeRole.name, GradeRole())
    name = make_module("def call_tool(args):\n    return 7\n")
    instrument(targets=[f"{name}:call_tool=tool"])
    assert importlib.import_module(name).call_tool({}) == 7

    @gym_instrument.grade  # type: ignore[attr-defined]
    def grade(answer: Any) -> str:
        return "A"

    assert grade("x") == "A"
    assert "grade" in dir(gym_instrument)
    (tool,) = telemetry.spans("gym.tool")
    assert tool.kind is SpanKind.CLIENT
    (graded,) = telemetry.spans("gym.grade")
    assert graded.kind is SpanKind.PRODUCER and graded.attributes["graded"] is True


def test_a_role_without_a_span_says_what_its_call_runs_in_and_what_its_result_makes(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role added later with no span of its own: its context and its child spans are its hooks
    (spanless_context, emit); the engine is not edited for it."""
    from opentelemetry import context as otel_context

    from gym_instrument.role import ROLES, Role

    key = otel_context.create_key("test.episode")

    class EpisodeRole(Role):
        name = "episode"
        row_names = ("label",)

        def spanless_context(self, call: Any, flight: Any) -> Any:
            return otel_context.set_value(key, flight.row, flight.current)

        def emit(self, call: Any, flight: Any, result: Any) -> None:
            tracer = flight.tracer()
            for item in result:
                tracer.start_span("test.item", attributes={"item": item}).end()

    monkeypatch.setitem(ROLES, EpisodeRole.name, EpisodeRole())
    name = make_module("from opentelemetry import context\n\ndef play(label, key):\n    return [context.get_value(key), 'b']\n")
    instrument(targets=[f"{name}:play=episode"])
    assert importlib.import_module(name).play("a", key) == ["a", "b"]
    assert [span.attributes["item"] for span in telemetry.spans("test.item")] == ["a", "b"]


def test_a_role_added_later_with_its_own_hooks_defers_its_end_and_is_remembered(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role of a shape no shipped role has, added later: an episode opened by one call and closed
    later. Its hooks alone make its span carry its rollout id in baggage while the call runs, stay
    open past the call's return until the episode closes (defer), take the closing score (on_success
    over what the close hands on), and be remembered when it ends (on_end), so that a health verdict
    naming the episode becomes the child of its ended span. Nothing in the engine is edited for it."""
    from gym_instrument.link.identity import RolloutIdentity
    from gym_instrument.role import ROLES, Role

    class Episode:
        """What opening an episode returns; closing it later ends its span."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.on_close: Any = None

        def close(self, score: float) -> None:
            if self.on_close is not None:
                self.on_close(score)

    class EpisodeRole(Role):
        name = "episode"
        span_name = "test.episode"
        row_names = ("name",)

        def start_attributes(self, call: Any, row: Any, current: Any) -> Any:
            return {semconv.ROLLOUT_ID: row}, RolloutIdentity(rollout_id=row, custom_id=True)

        def on_success(self, call: Any, row: Any, result: Any) -> dict[str, Any]:
            return {"test.score": result} if isinstance(result, float) else {}

        def defer(self, call: Any, pending: Any, result: Any) -> bool:
            result.on_close = lambda score: pending.finish(score)
            return True

        def on_end(self, call: Any, flight: Any, attributes: Any) -> None:
            if flight.ok and flight.setup.remembers:
                flight.setup.links.remember(flight.span.get_span_context(), flight.identity)

    monkeypatch.setitem(ROLES, EpisodeRole.name, EpisodeRole())
    source = (
        "from opentelemetry import baggage\n\n"
        "seen = []\n\n"
        "def open_episode(name, make):\n"
        "    seen.append(baggage.get_baggage('nemo.gym.rollout.id'))\n"
        "    return make(name)\n\n"
        "def judge(records):\n"
        "    return records\n"
    )
    name = make_module(source)
    instrument(targets=[f"{name}:open_episode=episode", f"{name}:judge=health"])
    module = importlib.import_module(name)
    episode = module.open_episode("ep-7", Episode)
    assert isinstance(episode, Episode) and module.seen == ["ep-7"]
    assert telemetry.spans("test.episode") == []  # the call returned; the episode is still open
    episode.close(0.5)
    episode.close(0.25)  # closed twice: the span ended once, with the first score
    (span,) = telemetry.spans("test.episode")
    assert dict(span.attributes) == {semconv.ROLLOUT_ID: "ep-7", "test.score": 0.5}
    assert module.judge([{"rollout_id": "ep-7", "verdict": "healthy"}]) == [{"rollout_id": "ep-7", "verdict": "healthy"}]
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.parent is not None and health.parent.span_id == span.context.span_id
    assert health.context.trace_id == span.context.trace_id
    assert health.attributes[semconv.ROLLOUT_ID] == "ep-7"


def test_a_failing_rule_is_logged_once_per_target_not_once_per_role(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The same role's rules failing on two targets (two frameworks' dispatches): each is logged."""
    from gym_instrument.schema import RolloutSchema

    class Broken(RolloutSchema):
        def identity(self, row: Any) -> Any:
            raise RuntimeError("schema bug")

    first = gym_instrument.dispatch(schema=Broken())(lambda row: row)
    second_module = make_module("def send(row):\n    return row\n")
    second = gym_instrument.Target(f"{second_module}:send", "dispatch", schema=Broken())
    instrument(targets=[second])
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for _ in range(3):
            assert first({"a": 1}) == {"a": 1}
            assert importlib.import_module(second_module).send({"a": 2}) == {"a": 2}
    logged = [record.getMessage() for record in caplog.records if "start rules of the dispatch role" in record.getMessage()]
    assert len(logged) == 2, logged
    assert any(second_module in message for message in logged)
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 6


def test_instrument_role_extractors_reach_decorated_functions(instrument: Any, telemetry: Any) -> None:
    # SPEC section 6: users add extractors per role; a decorated function is of its role too.
    @gym_instrument.verify
    async def before(body: Any) -> Any:  # decorated before instrument()
        return {"reward": 1.0}

    instrumentor = instrument(targets=[], extractors={"verify": [lambda call: {"test.role": "verify"}]})

    @gym_instrument.verify(extractors=[lambda call: {"test.own": True}])
    async def after(body: Any) -> Any:  # decorated after it, with an extractor of its own
        return {"reward": 0.5}

    asyncio.run(before({}))
    asyncio.run(after({}))
    first, second = telemetry.spans(semconv.SPAN_VERIFY)
    assert first.attributes["test.role"] == "verify" and first.attributes[semconv.ROLLOUT_REWARD] == 1.0
    assert second.attributes["test.role"] == "verify" and second.attributes["test.own"] is True
    assert second.attributes[semconv.ROLLOUT_REWARD] == 0.5

    # Undone, then instrumented again with the role's defaults replaced: neither keeps the old extractor.
    instrumentor.uninstrument()
    telemetry.clear()
    instrument(targets=[], extractors={"verify": [lambda call: {"test.role": "again"}]}, replace_default_extractors=["verify"])
    asyncio.run(before({}))
    asyncio.run(after({}))
    first, second = telemetry.spans(semconv.SPAN_VERIFY)
    assert first.attributes["test.role"] == "again" and semconv.ROLLOUT_REWARD not in first.attributes
    assert second.attributes["test.role"] == "again" and second.attributes["test.own"] is True
    assert semconv.ROLLOUT_REWARD not in second.attributes
