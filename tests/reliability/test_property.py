"""Bad input, by property: whatever a row, request, result or verdict holds, the wrapped function
behaves as before, every exported attribute is one an OTLP exporter can encode, and the SPEC's
rules (task-id precedence, reward rule, sorted distinct checks, health parents) hold.

Examples per property: ``GYM_FUZZ_EXAMPLES`` (``make fuzz`` runs 20,000), else 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, context
from opentelemetry.trace import StatusCode

from gym_instrument import semconv

from . import hostile, pipeline, spec_model, strategies
from .spec_model import BOUNDED, RENDER_BOUND
from .strategies import CANARY, Model
from .support import Sink, all_logs, assert_exportable, fuzz_examples, instrumented, metrics_payload

EXAMPLES = fuzz_examples()
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
SECRETS = (CANARY.encode(), hostile.HOSTILE_SECRET.encode())
DISPATCH_KEYS = {
    semconv.TASK_ID,
    semconv.TASK_INDEX,
    semconv.ROLLOUT_REPEAT,
    semconv.ROLLOUT_ATTEMPT,
    semconv.ROLLOUT_ID,
    semconv.AGENT_NAME,
}


# -- comparing what was exported with what the spec says --------------------------------------


def _is_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udfff"


def assert_text(got: Any, want: str, limit: int | None = None) -> None:
    """Equal, except that lone surrogates (which OTLP cannot carry) may have been replaced."""
    assert type(got) is str, f"{got!r} is not a str"
    if limit is not None:
        want = want[:limit]
    if not any(_is_surrogate(char) for char in want):
        assert got == want
        return
    assert len(got) == len(want)
    assert all(g == w for g, w in zip(got, want, strict=True) if not _is_surrogate(w)), (got, want)


def assert_attributes(actual: Any, expected: dict[str, Any], allowed_extra: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    actual = dict(actual or {})
    assert set(actual) - allowed_extra == set(expected), f"exported {sorted(actual)}, spec says {sorted(expected)}"
    for key, want in expected.items():
        got = actual[key]
        if want is BOUNDED:
            assert type(got) is str and 0 < len(got) <= RENDER_BOUND, f"{key}: {len(got)} characters"
        elif isinstance(want, str):
            assert_text(got, want)
        else:
            assert type(got) is type(want) and got == want, f"{key}: {got!r} != {want!r}"


def assert_error_span(span: Any, exception: BaseException) -> None:
    assert span.status.status_code is StatusCode.ERROR
    if isinstance(exception, asyncio.CancelledError | GeneratorExit):
        assert span.attributes[semconv.ERROR_TYPE] == semconv.ERROR_TYPE_CANCELLED
        return
    kind = type(exception)
    qualified = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    assert_text(span.attributes[semconv.ERROR_TYPE], qualified)
    assert [event.name for event in span.events] == ["exception"]


def assert_nothing_leaked(sink: Sink, spans: list[Any]) -> None:
    payload = assert_exportable(spans) + metrics_payload(sink.metrics_data())
    for secret in SECRETS:
        assert secret not in payload


def assert_no_secret_logged(logs: Any) -> None:
    """Checked once per property: failures are logged once per culprit, so the first example tells."""
    for secret in SECRETS:
        assert secret.decode() not in logs.text()


# -- calling the wrapped functions every way a pipeline does ---------------------------------------


def _run(coroutine: Any) -> tuple[str, Any]:
    async def settle() -> tuple[str, Any]:
        try:
            return ("return", await coroutine)
        except BaseException as exception:  # the caller compares it with what was raised inside
            return ("raise", exception)

    return asyncio.run(settle())


def _call(function: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("return", function())
    except BaseException as exception:
        return ("raise", exception)


def _drive_generator(row: Any, outcome: tuple[str, Any]) -> Any:
    steps = pipeline.Runner().dispatch_generator(row, outcome)
    assert next(steps) == "step"
    try:
        next(steps)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the generator yielded twice")


async def _drive_async_generator(row: Any, outcome: tuple[str, Any]) -> Any:
    items = [item async for item in pipeline.Runner().dispatch_async_generator(row, outcome)]
    assert items[0] == "step" and len(items) == 2
    return items[1]


async def _drive_async_context_manager(row: Any, outcome: tuple[str, Any]) -> Any:
    async with pipeline.Runner().dispatch_interaction(row) as entered:
        assert entered == "entered"
        return pipeline.settle(outcome)  # the body's outcome is the call's


DISPATCH_PATHS: dict[str, Callable[[Any, tuple[str, Any]], tuple[str, Any]]] = {
    "function": lambda row, outcome: _call(lambda: pipeline.dispatch(row, outcome)),
    "keyword": lambda row, outcome: _call(lambda: pipeline.dispatch(row=row, outcome=outcome)),
    "coroutine": lambda row, outcome: _run(pipeline.dispatch_async(row, outcome)),
    "client_post": lambda row, outcome: _run(pipeline.Client().post("agent", "/run", json=row, outcome=outcome)),
    "classmethod": lambda row, outcome: _call(lambda: pipeline.Runner.dispatch_classmethod(row, outcome)),
    "staticmethod": lambda row, outcome: _call(lambda: pipeline.Runner().dispatch_staticmethod(row, outcome)),
    "generator": lambda row, outcome: _call(lambda: _drive_generator(row, outcome)),
    "async_generator": lambda row, outcome: _run(_drive_async_generator(row, outcome)),
    "async_context_manager": lambda row, outcome: _run(_drive_async_context_manager(row, outcome)),
}


def assert_same_outcome(observed: tuple[str, Any], outcome: tuple[str, Any]) -> None:
    """The caller sees the identical object returned, or the identical exception raised."""
    assert observed[0] == outcome[0], f"expected to {outcome[0]} {outcome[1]!r}, got {observed[0]} {observed[1]!r}"
    assert observed[1] is outcome[1]


@contextlib.contextmanager
def traced(sink: Sink | None = None, **kwargs: Any) -> Iterator[Sink]:
    sink = sink or Sink()
    try:
        with instrumented(sink, pipeline.targets(pipeline.__name__), **kwargs):
            yield sink
    finally:
        sink.shutdown()


# -- dispatch ----------------------------------------------------------------------------------------


def test_property_dispatch_rows() -> None:
    """Any flat row, in any container, through any kind of function: SPEC 2 on the exported span."""
    with traced() as sink, all_logs() as logs:

        @FUZZ
        @given(row=strategies.flat_rows(), outcome=strategies.outcomes(), path=st.sampled_from(sorted(DISPATCH_PATHS)))
        def check(row: strategies.Row, outcome: tuple[str, Any], path: str) -> None:
            sink.clear()
            observed = DISPATCH_PATHS[path](row.build(), outcome)
            assert_same_outcome(observed, outcome)
            (span,) = sink.spans(semconv.SPAN_DISPATCH)
            expected = spec_model.dispatch_attributes(row.fields, row.unreadable)
            if outcome[0] == "raise":
                assert_attributes(span.attributes, expected, {semconv.ERROR_TYPE})
                assert_error_span(span, outcome[1])
            else:
                assert_attributes(span.attributes, expected)
                assert span.status.status_code is StatusCode.UNSET
            assert_nothing_leaked(sink, [span])

        check()
        assert_no_secret_logged(logs)


def test_property_dispatch_native_episodes() -> None:
    """NeMo Gym's native episode body: the rollout id from episode_id, the task id from task.task_id."""
    with traced() as sink, all_logs() as logs:

        @FUZZ
        @given(episode=strategies.native_episodes(), container=st.sampled_from(["dict", "pydantic", "namespace"]))
        def check(episode: strategies.NativeEpisode, container: str) -> None:
            sink.clear()
            body = strategies.contain(episode.body, container)
            outcome = ("return", object())
            assert_same_outcome(_run(pipeline.Client().post("env", "/run", json=body, outcome=outcome)), outcome)
            (span,) = sink.spans(semconv.SPAN_DISPATCH)
            assert_text(span.attributes[semconv.ROLLOUT_ID], episode.rollout_id)
            want = spec_model.task_id_render(episode.task_id)
            if want is spec_model.ABSENT:
                assert semconv.TASK_ID not in span.attributes
            else:
                assert_attributes({semconv.TASK_ID: span.attributes[semconv.TASK_ID]}, {semconv.TASK_ID: want})
            assert_nothing_leaked(sink, [span])

        check()
        assert_no_secret_logged(logs)


def test_property_attribute_length_limit_from_the_environment() -> None:
    """With OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT set, no exported string is longer, whatever the row."""
    limit = 40
    previous = os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
    os.environ["OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"] = str(limit)
    try:
        sink = Sink()  # the SDK reads its span limits when the provider is created
    finally:
        if previous is None:
            del os.environ["OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"]
        else:
            os.environ["OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"] = previous
    huge = st.one_of(strategies.huge_text, strategies.big_structures, st.integers(41, 5000).map(lambda n: "é" * n))
    with traced(sink), all_logs() as logs:

        @FUZZ
        @given(task_id=huge, rollout_id=st.one_of(strategies.huge_text, strategies.custom_ids), check_id=strategies.huge_text)
        def check(task_id: Any, rollout_id: str, check_id: str) -> None:
            sink.clear()
            row = {"task_id": task_id, "_ng_rollout_id": rollout_id, "_ng_task_index": 1, "_ng_rollout_index": 2}
            pipeline.dispatch(row, ("return", None))
            verdict = {"rollout_id": rollout_id, "verdict": "unhealthy", "findings": [{"check": check_id}]}
            pipeline.health_pass([], ("return", [verdict]))
            spans = sink.spans()
            assert [span.name for span in spans] == [semconv.SPAN_DISPATCH, semconv.SPAN_HEALTH]
            for span in spans:
                for key, value in span.attributes.items():
                    for text in value if isinstance(value, tuple) else (value,):
                        if isinstance(text, str):
                            assert len(text) <= limit, f"{key} has {len(text)} characters"
            dispatch_span, health_span = spans
            assert_text(dispatch_span.attributes[semconv.ROLLOUT_ID], rollout_id, limit)
            want = spec_model.task_id_render(task_id)
            if isinstance(want, str):
                assert_text(dispatch_span.attributes[semconv.TASK_ID], want, limit)
            assert health_span.attributes[semconv.HEALTH_CHECKS] == (check_id[:limit],)
            assert health_span.parent.span_id == dispatch_span.context.span_id
            assert_exportable(spans)

        check()
        assert_no_secret_logged(logs)


# -- verify ------------------------------------------------------------------------------------------


def _baggage_contexts() -> st.SearchStrategy[Any]:
    """Where verify runs: no rollout in context, raw baggage of any value, or inside a traced dispatch."""
    return st.one_of(
        st.none(),
        st.tuples(st.just("baggage"), st.one_of(strategies.texts, st.integers(), st.none())),
        st.tuples(st.just("dispatch"), strategies.flat_rows()),
    ).map(strategies.Given)


def test_property_verify() -> None:
    """Any request, any result, any context: SPEC 3 (rollout id, reward rule, masked, failure kind)."""
    with traced() as sink, all_logs() as logs:
        rewarded_rollouts: set[str] = set()  # the counter counts a rollout id once

        @FUZZ
        @given(
            given_request=strategies.verify_requests(),
            outcome=strategies.outcomes(strategies.verify_results()),
            given_where=_baggage_contexts(),
        )
        def check(given_request: strategies.Given, outcome: tuple[str, Any], given_where: strategies.Given) -> None:
            request, where = given_request.value, given_where.value
            sink.clear()
            rewarded_before = sink.metric_total(semconv.METRIC_REWARDED)
            baggage_value: Any = None
            if where is None:
                observed = _call(lambda: pipeline.verify(request, outcome))
            elif where[0] == "baggage":
                token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, where[1]))
                try:
                    observed = _call(lambda: pipeline.verify(body=request, outcome=outcome))
                finally:
                    context.detach(token)
                baggage_value = spec_model.id_string(where[1])
            else:
                row = where[1]
                observed = pipeline.dispatch_calling(row.build(), lambda: _call(lambda: pipeline.verify(request, outcome)))
                baggage_value = spec_model.dispatch_attributes(row.fields, row.unreadable).get(semconv.ROLLOUT_ID)
            assert_same_outcome(observed, outcome)

            (span,) = sink.spans(semconv.SPAN_VERIFY)
            expected: dict[str, Any] = {}
            rollout_id = spec_model.verify_rollout_id(request, baggage_value)
            if rollout_id is not None:
                expected[semconv.ROLLOUT_ID] = rollout_id
            if outcome[0] == "return":
                expected.update(spec_model.verify_result_attributes(outcome[1]))
                assert_attributes(span.attributes, expected)
            else:
                assert_attributes(span.attributes, expected, {semconv.ERROR_TYPE})
                assert_error_span(span, outcome[1])
            rewarded = sink.metric_total(semconv.METRIC_REWARDED) - rewarded_before
            counted = semconv.ROLLOUT_REWARD in expected and rollout_id not in rewarded_rollouts
            assert rewarded == (1 if counted else 0)
            if counted and rollout_id is not None:
                rewarded_rollouts.add(rollout_id)
            assert_nothing_leaked(sink, sink.spans())

        check()
        assert_no_secret_logged(logs)


# -- health ------------------------------------------------------------------------------------------

_example_bases = itertools.count(1)
VERDICT_FORMS = ("own_id", "bare", "indices", "indices_and_id", "jsonl_row", "none", "twice")
VERDICT_CONTAINERS = ("dict", "namespace", "pydantic", "digest")
RESULT_SHAPES = ("list", "tuple", "mapping", "result_object", "model", "single", "generator", "hostile")


@st.composite
def health_scenarios(draw: st.DrawFn) -> Any:
    """Dispatches (retries and custom ids included), then verdicts naming them every way, plus strays."""
    base = next(_example_bases) * 1000
    dispatches = []
    for position in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(("indices", "indices", "custom_and_indices", "custom_only")))
        # Custom ids keep to their own indices: NeMo Gym names a verdict by the custom id when
        # there is one, so a verdict never names "3-1-a2" for a dispatch whose id is custom.
        task_index = base + draw(st.integers(0, 3)) + (10 if kind == "custom_and_indices" else 0)
        rollout_index = draw(st.integers(0, 2))
        attempt = draw(st.integers(0, 2))
        row: dict[str, Any] = {"prompt": f"{CANARY}"}
        if kind != "custom_only":
            row.update(_ng_task_index=task_index, _ng_rollout_index=rollout_index)
            if attempt:
                row["_ng_attempt_index"] = attempt
        if kind != "indices":
            row["_ng_rollout_id"] = f"r-{base}-{position}"
        custom = kind != "indices"
        dispatches.append(
            spec_model.Dispatched(
                position=position,
                task_index=None if kind == "custom_only" else task_index,
                rollout_index=None if kind == "custom_only" else rollout_index,
                attempt=attempt,
                rollout_id=row["_ng_rollout_id"] if custom else spec_model.index_form(task_index, rollout_index, attempt),
                custom=custom,
            )
        )
        dispatches[-1].row = row  # type: ignore[attr-defined]

    identities: list[dict[str, Any]] = []
    for dispatch in dispatches:
        form = draw(st.sampled_from(VERDICT_FORMS))
        has_indices = dispatch.task_index is not None
        if form == "none":
            continue
        if form in ("bare", "indices", "indices_and_id", "jsonl_row") and not has_indices:
            form = "own_id"
        identity: dict[str, Any]
        if form in ("own_id", "twice"):
            identity = {"rollout_id": dispatch.rollout_id}
        elif form == "bare":
            identity = {"rollout_id": f"{dispatch.task_index}-{dispatch.rollout_index}"}
        elif form == "indices":
            identity = {"task_index": dispatch.task_index, "rollout_index": dispatch.rollout_index}
        elif form == "indices_and_id":
            identity = {
                "task_index": dispatch.task_index,
                "rollout_index": dispatch.rollout_index,
                "rollout_id": dispatch.rollout_id,
            }
        else:
            identity = {"_ng_task_index": dispatch.task_index, "_ng_rollout_index": dispatch.rollout_index}
        identities.append(identity)
        if form == "twice":
            identities.append(dict(identity))
    strays = draw(
        st.lists(
            st.one_of(
                st.builds(lambda t, r: {"task_index": base + 500 + t, "rollout_index": r}, st.integers(0, 5), st.integers(0, 5)),
                st.builds(lambda i: {"rollout_id": f"r-unknown-{i}"}, st.integers(0, 5)),
                st.builds(lambda t: {"task_index": str(base + t), "rollout_index": "0"}, st.integers(0, 3)),
                st.builds(
                    lambda t: {"task_index": str(base + t), "rollout_index": "0", "rollout_id": f"{base + t}-0"},
                    st.integers(0, 3),
                ),
                st.builds(lambda v: {"task_index": v, "rollout_index": v}, strategies.index_values),
                st.just({"verdict": "healthy"}),
            ),
            max_size=4,
        )
    )
    identities.extend(strays)
    order = draw(st.permutations(range(len(identities))))
    verdicts = []
    for position in order:
        fields = strategies.materialize(
            {
                **identities[position],
                "verdict": draw(
                    st.one_of(
                        st.sampled_from(["healthy", "unhealthy", "unobserved"]),
                        strategies.plain_text,
                        st.none(),
                        strategies.hostiles,
                    )
                ),
                "findings": draw(strategies.findings()),
                "unobserved": [f"{CANARY}"],
            }
        )
        container = draw(st.sampled_from(VERDICT_CONTAINERS))
        verdicts.append((fields, _verdict(fields, container)))
    verdicts.extend((None, strategies.materialize(value)) for value in draw(st.lists(strategies.hostiles, max_size=2)))
    shape = draw(st.sampled_from(RESULT_SHAPES))
    return HealthScenario(dispatches, verdicts, shape)


class HealthScenario(strategies.Shown):
    def __init__(self, dispatches: list[Any], verdicts: list[tuple[Any, Any]], shape: str) -> None:
        self.dispatches, self.verdicts, self.shape = dispatches, verdicts, shape

    def __repr__(self) -> str:
        rows = [strategies.describe(dispatch.row) for dispatch in self.dispatches]
        verdicts = [strategies.describe(fields) for fields, _verdict in self.verdicts]
        return f"HealthScenario(dispatched={rows}, verdicts={verdicts}, shape={self.shape!r})"


def _verdict(fields: dict[str, Any], container: str) -> Any:
    if container == "digest":
        return pipeline.RolloutDigest(
            task_index=fields.get("task_index", fields.get("_ng_task_index")),
            rollout_index=fields.get("rollout_index", fields.get("_ng_rollout_index")),
            rollout_id=fields.get("rollout_id"),
            verdict=fields["verdict"],
            findings=fields["findings"],
        )
    return strategies.contain(fields, container)


def _digest_view(fields: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A RolloutDigest always has all three identity fields (None when the verdict had none)."""
    return (
        fields.get("rollout_id"),
        fields.get("task_index", fields.get("_ng_task_index")),
        fields.get("rollout_index", fields.get("_ng_rollout_index")),
    )


def _result(shape: str, verdicts: list[Any]) -> tuple[Any, bool]:
    """The health function's return value, and whether the package may read verdicts from it."""
    if shape == "list":
        return list(verdicts), True
    if shape == "tuple":
        return tuple(verdicts), True
    if shape == "mapping":
        return {"rollouts": list(verdicts), "summary": f"{CANARY}"}, True
    if shape == "result_object":
        return pipeline.HealthCheckResult(rollouts=list(verdicts)), True
    if shape == "model":
        return Model(rollouts=list(verdicts)), True
    if shape == "single" and len(verdicts) == 1:
        return verdicts[0], True
    if shape == "hostile":
        return hostile.RaisingGetattr(), False
    return (verdict for verdict in verdicts), False  # a one-shot iterator the host still needs


def test_property_health_verdicts() -> None:
    """SPEC 4: one health span per matched dispatch, under it; sorted distinct checks; nothing else."""
    with traced() as sink, all_logs() as logs:

        @FUZZ
        @given(scenario=health_scenarios())
        def check(scenario: Any) -> None:
            sink.clear()
            model = spec_model.LinkModel()
            for dispatch in scenario.dispatches:
                pipeline.dispatch(dispatch.row, ("return", None))
                model.dispatched(dispatch)
            dispatch_spans = sink.spans(semconv.SPAN_DISPATCH)
            assert len(dispatch_spans) == len(scenario.dispatches)

            result, readable = _result(scenario.shape, [verdict for _fields, verdict in scenario.verdicts])
            outcome = ("return", result)
            assert_same_outcome(_call(lambda: pipeline.health_pass([], outcome)), outcome)
            if scenario.shape == "generator":
                assert len(list(result)) == len(scenario.verdicts)  # not consumed by the package

            expected = []
            if readable:
                for fields, verdict in scenario.verdicts:
                    if fields is None:
                        continue  # a hostile verdict names nothing
                    identity = (
                        _digest_view(fields)
                        if isinstance(verdict, pipeline.RolloutDigest)
                        else (
                            fields.get("rollout_id", spec_model.ABSENT),
                            fields.get("task_index", fields.get("_ng_task_index", spec_model.ABSENT)),
                            fields.get("rollout_index", fields.get("_ng_rollout_index", spec_model.ABSENT)),
                        )
                    )
                    matched = model.take(*identity)
                    if matched is not None:
                        expected.append((matched, verdict))
            health_spans = sink.spans(semconv.SPAN_HEALTH)
            assert len(health_spans) == len(expected)
            for span, (matched, verdict) in zip(health_spans, expected, strict=True):
                parent = dispatch_spans[matched.position]
                assert span.parent is not None and span.parent.span_id == parent.context.span_id
                assert span.context.trace_id == parent.context.trace_id
                want = {semconv.ROLLOUT_ID: matched.rollout_id, semconv.HEALTH_CHECKS: tuple(spec_model.checks(verdict))}
                verdict_name = spec_model.readable_str(spec_model.read(verdict, "verdict"))
                if verdict_name is not None:
                    want[semconv.HEALTH_VERDICT] = verdict_name
                assert set(span.attributes) == set(want)
                assert span.attributes[semconv.ROLLOUT_ID] == matched.rollout_id
                assert span.attributes[semconv.HEALTH_CHECKS] == want[semconv.HEALTH_CHECKS]
                if verdict_name is not None:
                    assert_text(span.attributes[semconv.HEALTH_VERDICT], verdict_name)
            assert_nothing_leaked(sink, sink.spans())

        check()
        assert_no_secret_logged(logs)


# -- user extractors that return junk or raise ----------------------------------------------------

JUNK: dict[str, Any] = {}


def junk_extractor(call: Any) -> Any:
    """A user's extractor: returns whatever the example says, or raises it."""
    value = JUNK["value"]
    if isinstance(value, BaseException):
        raise value
    return value


junk_keys = st.one_of(st.text(max_size=8), strategies.any_chars_text, st.integers(), st.none(), st.just(""))
junk_values = st.one_of(
    strategies.anything,
    st.lists(st.one_of(st.integers(), st.text(max_size=4), st.booleans(), st.floats()), max_size=4),
    st.tuples(strategies.ints, strategies.ints),
)


@st.composite
def junk_returns(draw: st.DrawFn) -> strategies.Given:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        # KeyboardInterrupt and SystemExit are the process's own and rightly go on: not drawn here.
        raised = st.one_of(strategies.exceptions, st.builds(RuntimeError, st.just(CANARY)), st.builds(GeneratorExit))
        return strategies.Given(draw(raised.filter(lambda error: not isinstance(error, KeyboardInterrupt | SystemExit))))
    if choice == 1:
        return strategies.Given(strategies.materialize(draw(strategies.hostiles)))
    if choice == 2:
        # Not the 50,000-key dict: past OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (128) the SDK itself drops
        # the oldest attributes, the package's own among them.
        small = st.one_of(strategies.json_values, strategies.texts, strategies.ints, strategies.floats, strategies.models)
        return strategies.Given(strategies.materialize(draw(small)))
    return strategies.Given(strategies.materialize(draw(st.dictionaries(junk_keys, junk_values, max_size=6))))


def test_property_user_extractors_returning_junk() -> None:
    """An extractor may return anything or raise anything: the call is untouched, the default
    attributes are still there, and whatever is exported is valid (or dropped)."""
    extractors = {"dispatch": [junk_extractor], "verify": [junk_extractor]}
    with traced(extractors=extractors) as sink, all_logs() as logs:

        @FUZZ
        @given(junk=junk_returns(), outcome=strategies.outcomes())
        def check(junk: strategies.Given, outcome: tuple[str, Any]) -> None:
            sink.clear()
            JUNK["value"] = junk.value
            row = {"_ng_task_index": 4, "_ng_rollout_index": 2, "prompt": CANARY}
            assert_same_outcome(_call(lambda: pipeline.dispatch(row, outcome)), outcome)
            result = {"reward": 0.5}
            verified = _call(lambda: pipeline.dispatch_calling(row, lambda: pipeline.verify({}, ("return", result))))
            assert verified == ("return", result) or verified[1] is result
            dispatch_span, verify_span, _outer = sink.spans()
            assert dispatch_span.attributes[semconv.ROLLOUT_ID] == "4-2"
            assert verify_span.attributes[semconv.ROLLOUT_ID] == "4-2"
            assert verify_span.attributes[semconv.ROLLOUT_REWARD] == 0.5
            assert_nothing_leaked(sink, sink.spans())

        check()
        assert_no_secret_logged(logs)
