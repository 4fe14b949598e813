"""SPEC section 4: health spans as children of their already-ended dispatch spans."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.link.memory import DispatchLinks
from tests.conftest import load_jsonl


@dataclass
class Finding:
    check: str
    subject: str = "rollout"
    locator: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class RolloutDigest:
    task_index: Any
    rollout_index: Any
    rollout_id: str
    verdict: str
    findings: list[Finding] = field(default_factory=list)
    unobserved: list[str] = field(default_factory=list)


@dataclass
class HealthCheckResult:
    rollouts: list[RolloutDigest]


def dispatch_rows(pipeline: Any, rows: list[dict[str, Any]]) -> None:
    client = pipeline.ServerClient()

    async def run_all() -> None:
        await asyncio.gather(*(client.post("agent", "/run", json=row) for row in rows))

    asyncio.run(run_all())


def by_rollout_id(spans: Any) -> dict[str, Any]:
    return {span.attributes[semconv.ROLLOUT_ID]: span for span in spans}


def test_health_span_is_child_of_the_ended_dispatch(pipeline: Any, telemetry: Any) -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r} for t in range(3) for r in range(2)]
    dispatch_rows(pipeline, rows)
    dispatches = by_rollout_id(telemetry.spans(semconv.SPAN_DISPATCH))
    digests = [
        RolloutDigest(0, 0, "0-0", "healthy"),
        RolloutDigest(
            1, 1, "1-1", "unhealthy", [Finding("model_call_failed"), Finding("agent_turn_hollow"), Finding("model_call_failed")]
        ),
        RolloutDigest(2, 0, "2-0", "unobserved"),
    ]
    result = HealthCheckResult(digests)
    assert pipeline.run_health_checks(digests) == {"rollouts": digests}
    health = by_rollout_id(telemetry.spans(semconv.SPAN_HEALTH))
    assert set(health) == {"0-0", "1-1", "2-0"}
    for rollout_id, span in health.items():
        parent = dispatches[rollout_id]
        assert span.context.trace_id == parent.context.trace_id
        assert span.parent.span_id == parent.context.span_id
        assert span.start_time >= parent.end_time  # the dispatch had already ended
        assert span.kind.name == "INTERNAL"
    assert health["1-1"].attributes[semconv.HEALTH_CHECKS] == ("agent_turn_hollow", "model_call_failed")
    assert health["1-1"].attributes[semconv.HEALTH_VERDICT] == "unhealthy"
    assert health["0-0"].attributes[semconv.HEALTH_CHECKS] == ()
    assert health["2-0"].attributes[semconv.HEALTH_VERDICT] == "unobserved"
    assert result.rollouts is digests


def test_real_verdict_rows_find_their_dispatches(pipeline: Any, telemetry: Any) -> None:
    verdicts = load_jsonl("crafted_verdicts.jsonl")
    rows = [
        {"_ng_task_index": v["_ng_task_index"], "_ng_rollout_index": v["_ng_rollout_index"]}
        for v in verdicts
        if isinstance(v["_ng_task_index"], int) and v["rollout_id"] != "my-explicit-id"
    ]
    rows.append({"_ng_task_index": 0, "_ng_rollout_index": 1, "_ng_rollout_id": "my-explicit-id"})
    dispatch_rows(pipeline, rows)
    pipeline.run_health_checks(verdicts)
    health = by_rollout_id(telemetry.spans(semconv.SPAN_HEALTH))
    traced = [v for v in verdicts if isinstance(v["_ng_task_index"], int)]
    assert len(health) == len(traced) == len(rows)  # the unreadable record (string index) matches nothing
    for verdict in traced:
        span = health[verdict["rollout_id"]]
        assert span.attributes[semconv.HEALTH_VERDICT] == verdict["verdict"]
        assert list(span.attributes[semconv.HEALTH_CHECKS]) == sorted({f["check"] for f in verdict["findings"]})


def test_second_health_pass_adds_nothing(pipeline: Any, telemetry: Any) -> None:
    dispatch_rows(pipeline, [{"_ng_task_index": 0, "_ng_rollout_index": 0}])
    digests = [RolloutDigest(0, 0, "0-0", "healthy")]
    pipeline.run_health_checks(digests)
    pipeline.run_health_checks(digests)
    assert len(telemetry.spans(semconv.SPAN_HEALTH)) == 1


def test_no_orphan_for_an_untraced_rollout(pipeline: Any, telemetry: Any) -> None:
    dispatch_rows(pipeline, [{"_ng_task_index": 0, "_ng_rollout_index": 0}])
    pipeline.run_health_checks(
        [
            RolloutDigest(9, 9, "9-9", "unhealthy", [Finding("model_call_failed")]),
            RolloutDigest("0", "0", "weird", "healthy"),
            {"rollout_id": "never-dispatched", "verdict": "healthy"},
        ]
    )
    assert telemetry.spans(semconv.SPAN_HEALTH) == []


def test_retry_wins_over_the_first_attempt(pipeline: Any, telemetry: Any) -> None:
    """NeMo Gym's digest says "0-0" for a rollout whose dispatch was "0-0-a1"."""
    dispatch_rows(pipeline, [{"_ng_task_index": 0, "_ng_rollout_index": 0}])
    dispatch_rows(pipeline, [{"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_attempt_index": 1}])
    retry = by_rollout_id(telemetry.spans(semconv.SPAN_DISPATCH))["0-0-a1"]
    pipeline.run_health_checks([RolloutDigest(0, 0, "0-0", "healthy")])
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.parent.span_id == retry.context.span_id
    assert health.attributes[semconv.ROLLOUT_ID] == "0-0-a1"


def test_indices_only_verdict_matches_latest_attempt(pipeline: Any, telemetry: Any) -> None:
    for attempt in (0, 1, 2):
        dispatch_rows(pipeline, [{"_ng_task_index": 4, "_ng_rollout_index": 2, "_ng_attempt_index": attempt}])
    latest = by_rollout_id(telemetry.spans(semconv.SPAN_DISPATCH))["4-2-a2"]
    pipeline.run_health_checks([{"task_index": 4, "rollout_index": 2, "verdict": "healthy"}])
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.parent.span_id == latest.context.span_id


def test_attempt_qualified_id_matches_that_attempt_only(pipeline: Any, telemetry: Any) -> None:
    dispatch_rows(pipeline, [{"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 2}])
    pipeline.run_health_checks([{"rollout_id": "3-1-a1", "verdict": "healthy"}])
    assert telemetry.spans(semconv.SPAN_HEALTH) == []  # attempt 1 was never the remembered one
    pipeline.run_health_checks([{"rollout_id": "3-1-a2", "verdict": "healthy"}])
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.attributes[semconv.ROLLOUT_ID] == "3-1-a2"


def test_custom_rollout_id_matches_by_id_and_by_indices(pipeline: Any, telemetry: Any) -> None:
    dispatch_rows(
        pipeline,
        [
            {"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_rollout_id": "alpha"},
            {"_ng_task_index": 0, "_ng_rollout_index": 1, "_ng_rollout_id": "beta"},
        ],
    )
    dispatches = by_rollout_id(telemetry.spans(semconv.SPAN_DISPATCH))
    pipeline.run_health_checks(
        [
            {"rollout_id": "alpha", "task_index": 0, "rollout_index": 0, "verdict": "healthy"},
            {"task_index": 0, "rollout_index": 1, "verdict": "unhealthy"},
        ]
    )
    health = by_rollout_id(telemetry.spans(semconv.SPAN_HEALTH))
    assert health["alpha"].parent.span_id == dispatches["alpha"].context.span_id
    assert health["beta"].parent.span_id == dispatches["beta"].context.span_id
    pipeline.run_health_checks(
        [{"rollout_id": "beta", "verdict": "healthy"}, {"task_index": 0, "rollout_index": 0, "verdict": "x"}]
    )
    assert len(telemetry.spans(semconv.SPAN_HEALTH)) == 2  # both consumed, whichever way they were found


def test_native_episode_dispatch_gets_its_verdict(pipeline: Any, telemetry: Any) -> None:
    dispatch_rows(pipeline, [{"episode_id": {"rollout_id": "ep-1", "attempt": 0}, "task": {"task_id": {"taskset": "t"}}}])
    pipeline.run_health_checks([{"rollout_id": "ep-1", "verdict": "healthy"}])
    (health,) = telemetry.spans(semconv.SPAN_HEALTH)
    assert health.attributes[semconv.ROLLOUT_ID] == "ep-1"


def test_health_result_shapes(pipeline: Any, telemetry: Any) -> None:
    """``.rollouts``, ``["rollouts"]``, a list, one verdict; a one-shot iterator is left alone."""
    rows = [{"_ng_task_index": 7, "_ng_rollout_index": r} for r in range(5)]
    dispatch_rows(pipeline, rows)

    shapes = [
        HealthCheckResult([RolloutDigest(7, 0, "7-0", "healthy")]),
        {"rollouts": [{"task_index": 7, "rollout_index": 1, "verdict": "healthy"}]},
        [RolloutDigest(7, 2, "7-2", "healthy")],
        RolloutDigest(7, 3, "7-3", "healthy"),
    ]
    import gym_instrument

    @gym_instrument.health
    def judged(result: Any) -> Any:
        return result

    for shape in shapes:
        assert judged(shape) is shape
    generator = (d for d in [RolloutDigest(7, 4, "7-4", "healthy")])
    assert judged(generator) is generator
    assert next(generator).rollout_id == "7-4"  # not consumed by the instrumentation

    assert sorted(by_rollout_id(telemetry.spans(semconv.SPAN_HEALTH))) == ["7-0", "7-1", "7-2", "7-3"]


def test_health_from_a_worker_thread(pipeline: Any, telemetry: Any) -> None:
    """The collector runs the health pass via asyncio.to_thread."""
    dispatch_rows(pipeline, [{"_ng_task_index": 0, "_ng_rollout_index": r} for r in range(4)])

    async def collector() -> Any:
        return await asyncio.to_thread(pipeline.run_health_checks, [RolloutDigest(0, r, f"0-{r}", "healthy") for r in range(4)])

    asyncio.run(collector())
    assert len(telemetry.spans(semconv.SPAN_HEALTH)) == 4


def test_health_spans_without_metrics(make_module: Any, instrument: Any, telemetry: Any) -> None:
    import importlib

    name = make_module()
    instrument(meter_provider=None, targets=[f"{name}:send_row=dispatch@nemo_gym", f"{name}:run_health_checks=health@nemo_gym"])
    module = importlib.import_module(name)
    module.send_row({"_ng_task_index": 1, "_ng_rollout_index": 1})
    module.run_health_checks([{"task_index": 1, "rollout_index": 1, "verdict": "healthy"}])
    assert len(telemetry.spans(semconv.SPAN_HEALTH)) == 1


def test_capacity_evicts_oldest_and_logs_once(
    pipeline: Any, telemetry: Any, instrument: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline_module = pipeline
    from gym_instrument import GymInstrumentor

    GymInstrumentor().uninstrument()
    name = pipeline_module.__name__
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym", f"{name}:run_health_checks=health@nemo_gym"], link_capacity=3)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for rollout in range(5):
            pipeline_module.send_row({"_ng_task_index": 0, "_ng_rollout_index": rollout})
    warnings = [r for r in caplog.records if "capacity" in r.getMessage()]
    assert len(warnings) == 1
    assert telemetry.metric_total(semconv.METRIC_LINK_EVICTIONS) == 2
    pipeline_module.run_health_checks([{"task_index": 0, "rollout_index": r, "verdict": "healthy"} for r in range(5)])
    assert sorted(by_rollout_id(telemetry.spans(semconv.SPAN_HEALTH))) == ["0-2", "0-3", "0-4"]


def test_links_are_bounded_and_thread_safe() -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    links = DispatchLinks(1000)

    def remember(thread: int) -> None:
        for index in range(5000):
            context = SpanContext(thread + 1, index + 1, False, TraceFlags(1))
            links.remember(context, RolloutIdentity(task_index=thread, rollout_index=index))

    threads = [threading.Thread(target=remember, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(links) == 1000
    assert links.evictions == 4 * 5000 - 1000
    found = [links.take(None, t, i) for t in range(4) for i in range(5000)]
    assert sum(link is not None for link in found) == 1000
    assert len(links) == 0


def test_links_find_every_dispatch_across_batches_keys_and_retries() -> None:
    """Dispatches are queued and folded in batches: each verdict still finds exactly its own latest attempt."""
    from opentelemetry.trace import SpanContext, TraceFlags

    links = DispatchLinks(1_000_000)
    big_task, big_rollout = 2**40 + 3, 2**16 + 5  # indices past the small-key range
    identities = [(task, rollout) for task in range(400) for rollout in range(4)]
    identities += [(big_task, 0), (0, big_rollout), (big_task, big_rollout), (2**63 - 1, 2**63 - 1)]
    expected: dict[tuple[int, int], tuple[int, int, int]] = {}
    span_id = 0
    for attempt in (None, 1):  # every rollout twice: the retry, queued after it, must win
        for task, rollout in identities:
            span_id += 1
            trace_id = (task * 7919 + rollout) % (2**128 - 1) + 1
            context = SpanContext(trace_id, span_id, False, TraceFlags(span_id % 2))
            links.remember(context, RolloutIdentity(task_index=task, rollout_index=rollout, attempt=attempt))
            expected[(task, rollout)] = (trace_id, span_id, span_id % 2)
    assert 2 * len(identities) > 3 * DispatchLinks.BATCH  # several batches, and retries within one
    assert len(links) == len(identities)
    for (task, rollout), (trace_id, span_id, sampled) in expected.items():
        link = links.take(f"{task}-{rollout}", task, rollout)
        assert link is not None
        assert (link[0].trace_id, link[0].span_id) == (trace_id, span_id)
        assert int(link[0].trace_flags) == sampled and link[0].is_valid
        assert link[1] == f"{task}-{rollout}-a1"
    assert len(links) == 0


def test_dispatches_are_remembered_only_when_a_health_function_is_instrumented(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no health target (nor @health function), no verdict can ask: nothing is kept, so even a
    capacity of 1 never evicts."""
    from gym_instrument.plan.engine import ENGINE

    monkeypatch.setattr(ENGINE, "health_decorated", False)  # whatever other tests decorated
    name = make_module()
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"], link_capacity=1)
    module = __import__(name)
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        for rollout in range(3):
            module.send_row({"_ng_task_index": 0, "_ng_rollout_index": rollout})
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 3
    assert not [record for record in caplog.records if "capacity" in record.getMessage()]
    assert telemetry.metric_total(semconv.METRIC_LINK_EVICTIONS) == 0


def test_a_health_decorated_function_finds_dispatches_of_instrumented_targets(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gym_instrument
    from gym_instrument.plan.engine import ENGINE

    monkeypatch.setattr(ENGINE, "health_decorated", False)
    name = make_module()
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    module = __import__(name)

    @gym_instrument.health
    def check_rollouts(rollouts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"rollouts": rollouts}

    for rollout in range(2):
        module.send_row({"_ng_task_index": 4, "_ng_rollout_index": rollout})
    check_rollouts([{"task_index": 4, "rollout_index": r, "verdict": "healthy"} for r in range(2)])
    (first, second) = sorted(telemetry.spans(semconv.SPAN_HEALTH), key=lambda span: span.attributes[semconv.ROLLOUT_ID])
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    for health in (first, second):
        assert health.parent.span_id == dispatches[health.attributes[semconv.ROLLOUT_ID]].context.span_id


def test_pydantic_digests_make_the_spans_plain_verdicts_make(pipeline: Any, telemetry: Any) -> None:
    """NeMo Gym's digests are pydantic models, read directly: the same health spans and verdict counts as
    the same verdicts given as dicts (read field by field), in one pass each, retries and odd values included."""
    import pydantic

    class PydanticFinding(pydantic.BaseModel):
        check: str

    class PydanticDigest(pydantic.BaseModel):
        task_index: int | str
        rollout_index: int | str
        rollout_id: str
        verdict: str
        findings: list[PydanticFinding]

    def verdicts(first_task: int) -> list[dict[str, Any]]:
        named = [  # (task index, rollout index, rollout id, verdict, checks)
            (first_task, 0, f"{first_task}-0", "healthy", []),
            (first_task, 1, f"{first_task}-1", "unhealthy", ["b", "a", "b"]),
            (first_task + 1, 0, f"{first_task + 1}-0", "odd", []),
            (first_task + 1, 1, "elsewhere-9", "healthy", []),
            ("x", 0, f"{first_task + 2}-0", "healthy", []),
            (first_task + 2, 1, f"{first_task + 2}-1", "healthy", []),
        ]
        return [
            {
                "task_index": task,
                "rollout_index": rollout,
                "rollout_id": rollout_id,
                "verdict": verdict,
                "findings": [{"check": check} for check in checks],
            }
            for task, rollout, rollout_id, verdict, checks in named
        ]

    def relative_id(rollout_id: str, first_task: int) -> str:
        task, _, rest = rollout_id.partition("-")
        return f"{int(task) - first_task}-{rest}"

    def spans_and_counts(first_task: int, as_models: bool) -> tuple[Any, ...]:
        rows = [{"_ng_task_index": first_task + t, "_ng_rollout_index": r} for t in range(3) for r in range(2)]
        rows.append({"_ng_task_index": first_task + 2, "_ng_rollout_index": 1, "_ng_attempt_index": 1})  # a retry
        dispatch_rows(pipeline, rows)
        given = [PydanticDigest(**verdict) if as_models else verdict for verdict in verdicts(first_task)]
        before = {point.attributes["verdict"]: point.value for point in telemetry.metric_points(semconv.METRIC_VERDICTS)}
        pipeline.run_health_checks(given)
        after = {point.attributes["verdict"]: point.value for point in telemetry.metric_points(semconv.METRIC_VERDICTS)}
        spans = sorted(
            (
                relative_id(span.attributes[semconv.ROLLOUT_ID], first_task),
                span.attributes[semconv.HEALTH_VERDICT],
                span.attributes[semconv.HEALTH_CHECKS],
            )
            for span in telemetry.spans(semconv.SPAN_HEALTH)
        )
        telemetry.clear()
        return spans, {name: after[name] - before.get(name, 0) for name in after}

    as_models, as_dicts = spans_and_counts(100, True), spans_and_counts(200, False)
    assert as_models == as_dicts
    assert len(as_models[0]) == 4  # "elsewhere-9" and the "x" index name no traced dispatch


def test_a_digest_read_directly_gets_the_checks_of_findings_that_are_not_its_models(pipeline: Any, telemetry: Any) -> None:
    """A digest's findings are read as its Finding models (``.check``); findings of any other shape
    (dicts in a digest built without validation) still give their sorted distinct checks, held to
    the same rule as the same verdicts read field by field."""
    import pydantic

    class PydanticFinding(pydantic.BaseModel):
        check: Any

    class PydanticDigest(pydantic.BaseModel):
        task_index: int
        rollout_index: int
        rollout_id: str
        verdict: str
        findings: list[Any]

    dispatch_rows(pipeline, [{"_ng_task_index": 300, "_ng_rollout_index": rollout} for rollout in range(3)])
    pipeline.run_health_checks(
        [
            PydanticDigest.model_construct(
                task_index=300,
                rollout_index=0,
                rollout_id="300-0",
                verdict="unhealthy",
                findings=[{"check": "z"}, {"check": "a"}, {"check": "z"}],
            ),
            PydanticDigest(
                task_index=300, rollout_index=1, rollout_id="300-1", verdict="unhealthy", findings=[PydanticFinding(check="b")]
            ),
            PydanticDigest(
                task_index=300,
                rollout_index=2,
                rollout_id="300-2",
                verdict="unhealthy",
                findings=[
                    PydanticFinding(check=7),
                    PydanticFinding(check=""),
                    PydanticFinding(check="é"),
                    PydanticFinding(check="c"),
                ],
            ),
        ]
    )
    checks = {
        span.attributes[semconv.ROLLOUT_ID]: list(span.attributes[semconv.HEALTH_CHECKS])
        for span in telemetry.spans(semconv.SPAN_HEALTH)
    }
    assert checks == {"300-0": ["a", "z"], "300-1": ["b"], "300-2": ["c", "é"]}  # (no string, no check: 7 and "")


def test_an_empty_health_pass_takes_nothing_with_custom_ids_remembered() -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    links = DispatchLinks(10)
    links.remember(
        SpanContext(1, 2, False, TraceFlags(1)),
        RolloutIdentity(task_index=3, rollout_index=0, rollout_id="custom-3", custom_id=True),
    )
    assert links.take_many([]) == []
    assert len(links) == 1
    link = links.take("custom-3", None, None)
    assert link is not None and link[1] == "custom-3" and link[0].span_id == 2


def _context(number: int) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(number * 7919 + 1, number + 1, False, TraceFlags(1))


def test_a_retry_without_an_attempt_index_replaces_the_first_across_batches() -> None:
    """The usual keys (indices alone) are indexed in bulk: the later of two dispatches of one rollout
    wins, in one batch and across batches, and the earlier one is found by nothing."""
    links = DispatchLinks(1_000_000)
    rollouts = [(task, rollout) for task in range(300) for rollout in range(2)]
    for number, (task, rollout) in enumerate(rollouts + rollouts):  # 1,200 dispatches: three batches
        links.remember(_context(number), RolloutIdentity(task_index=task, rollout_index=rollout))
    assert len(links) == len(rollouts)
    found = links.take_many([(None, task, rollout) for task, rollout in rollouts])
    assert [link[0].span_id for link in found if link is not None] == [
        len(rollouts) + number + 1 for number in range(len(rollouts))
    ]
    assert links.take_many([(None, task, rollout) for task, rollout in rollouts]) == [None] * len(rollouts)


def test_a_batch_that_gets_a_custom_id_keeps_finding_its_plain_dispatches() -> None:
    """A batch of plain keys that then receives a dispatch with a custom id and one with an attempt
    (after a read indexed the first part) still finds every one of them, each by its own name."""
    links = DispatchLinks(1_000_000)
    links.remember(_context(1), RolloutIdentity(task_index=1, rollout_index=0))
    assert len(links) == 1  # indexed while the batch is still appended to
    links.remember(_context(2), RolloutIdentity(task_index=2, rollout_index=0, rollout_id="alpha", custom_id=True))
    links.remember(_context(3), RolloutIdentity(task_index=3, rollout_index=1, attempt=2))
    links.remember(_context(4), RolloutIdentity(task_index=4, rollout_index=0))
    assert len(links) == 4
    alpha, retried, plain_first, plain_last = (
        links.take("alpha", None, None),
        links.take(None, 3, 1),
        links.take(None, 1, 0),
        links.take("4-0", 4, 0),
    )
    assert alpha is not None and (alpha[1], alpha[0].span_id) == ("alpha", 3)
    assert retried is not None and (retried[1], retried[0].span_id) == ("3-1-a2", 4)
    assert plain_first is not None and (plain_first[1], plain_first[0].span_id) == ("1-0", 2)
    assert plain_last is not None and plain_last[0].trace_id == 4 * 7919 + 1
    assert len(links) == 0


def test_capacity_keeps_the_last_dispatches_that_ended() -> None:
    """Capacity counts the dispatches that ended last, found or not: one found by its verdict still
    takes its place until newer ones push it out, and only a dispatch nothing had found or replaced
    counts as evicted."""
    links = DispatchLinks(3)
    for rollout in range(3):
        links.remember(_context(rollout), RolloutIdentity(task_index=0, rollout_index=rollout))
    assert links.take(None, 0, 1) is not None  # found: it stays held, findable by nothing
    links.remember(_context(3), RolloutIdentity(task_index=0, rollout_index=3))
    assert (len(links), links.evictions) == (2, 1)  # 0-0 went, counted; 0-1 is still held
    links.remember(_context(4), RolloutIdentity(task_index=0, rollout_index=4))
    assert (len(links), links.evictions) == (3, 1)  # 0-1 went: it had been found, so no eviction
    assert [link is not None for link in links.take_many([(None, 0, r) for r in range(5)])] == [False, False, True, True, True]


def test_letting_go_a_replaced_dispatch_keeps_its_retry() -> None:
    links = DispatchLinks(3)
    for number, rollout in enumerate((0, 0, 1, 2)):  # 0-0 twice: the retry replaces the first
        links.remember(_context(number), RolloutIdentity(task_index=0, rollout_index=rollout))
    assert (len(links), links.evictions) == (3, 0)  # the first 0-0 went, but nothing could find it any more
    retry = links.take(None, 0, 0)
    assert retry is not None and retry[0].span_id == 2


def test_a_lookup_that_keeps_finds_the_retry_that_ended_after_the_index_was_built() -> None:
    """``find`` (a verify after its dispatch, one name a call) reads without the lock only once
    everything remembered is indexed: a retry still pending, or sealed by later dispatches but not
    yet indexed, wins over the first attempt the index holds, and is found again by the next lookup
    and by the health pass."""
    links = DispatchLinks(1_000_000)
    links.remember(_context(1), RolloutIdentity(task_index=0, rollout_index=0))
    assert len(links) == 1  # indexed
    first = links.find((None, 0, 0))
    assert first is not None and first[0].span_id == 2
    links.remember(_context(2), RolloutIdentity(task_index=0, rollout_index=0, attempt=1))  # pending
    retry = links.find((None, 0, 0))
    assert retry is not None and (retry[0].span_id, retry[1]) == (3, "0-0-a1")
    links.remember(_context(3), RolloutIdentity(task_index=0, rollout_index=0, attempt=2))
    for number in range(DispatchLinks.BATCH - 1):  # sealed by these dispatches' own remembering, not indexed
        links.remember(_context(10 + number), RolloutIdentity(task_index=1 + number, rollout_index=0))
    assert not links._pending  # (the state this test is about: sealed, not yet indexed)
    second_retry = links.find((None, 0, 0))
    assert second_retry is not None and (second_retry[0].span_id, second_retry[1]) == (4, "0-0-a2")
    again = links.find(("0-0", 0, 0))
    assert again is not None and again[0].span_id == 4
    taken = links.take(None, 0, 0)
    assert taken is not None and taken[0].span_id == 4
    assert links.find((None, 0, 0)) is None


def test_lookups_without_the_lock_find_every_dispatch_while_others_end_and_are_let_go() -> None:
    """Threads looking rollouts up one at a time while other threads remember dispatches (sealing,
    indexing, letting the oldest go): each lookup finds its own rollout's span, or, once that is
    let go, nothing; never another rollout's, and never nothing while it is held."""
    kept_rollouts = 2_000
    links = DispatchLinks(kept_rollouts + 6 * DispatchLinks.BATCH)
    for task in range(kept_rollouts):
        links.remember(_context(task), RolloutIdentity(task_index=task, rollout_index=0))
    assert len(links) == kept_rollouts
    wrong: list[Any] = []
    missing: list[int] = []
    stop = threading.Event()

    def remember_more(thread: int) -> None:
        number = 0
        while not stop.is_set() and number < 40 * DispatchLinks.BATCH:
            task = 10**6 * (thread + 1) + number
            links.remember(_context(task), RolloutIdentity(task_index=task, rollout_index=1))
            number += 1
            if number % 97 == 0:
                len(links)  # a read: everything sealed and indexed, the oldest let go

    def look_up(rounds: int) -> None:
        for _ in range(rounds):
            evicted_before = links.evictions
            for task in range(kept_rollouts):
                link = links.find((None, task, 0))
                if link is None:
                    if links.evictions == evicted_before == 0:
                        missing.append(task)
                elif (link[0].span_id, link[0].trace_id, link[1]) != (
                    task + 1,
                    task * 7919 + 1,
                    f"{task}-0",
                ):
                    wrong.append((task, link))

    writers = [threading.Thread(target=remember_more, args=(n,)) for n in range(2)]
    readers = [threading.Thread(target=look_up, args=(5,)) for _ in range(2)]
    for thread in (*writers, *readers):
        thread.start()
    for thread in readers:
        thread.join()
    stop.set()
    for thread in writers:
        thread.join()
    assert wrong == []
    assert missing == []


def test_a_lookup_without_the_lock_that_meets_a_seal_midway_looks_again_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup made while another thread seals (its pending dispatches moved, not yet indexed: the
    memory looks indexed from outside) finds nothing without the lock, so it looks again under the
    lock, once the seal is done: it finds the dispatch that was being sealed."""
    from gym_instrument.link import memory

    links = DispatchLinks(1_000_000)
    links.remember(_context(1), RolloutIdentity(task_index=0, rollout_index=0))
    assert len(links) == 1  # everything indexed: lookups read without the lock
    found: list[Any] = []
    lookups: list[threading.Thread] = []
    add = memory._Batch.add

    def add_with_a_lookup_midway(batch: Any, contexts: Any, identities: Any, by_task: bool) -> int:
        # (under the lock, in the middle of a seal)
        lookup = threading.Thread(target=lambda: found.append(links.find((None, 1, 0))))
        lookups.append(lookup)
        lookup.start()
        lookup.join(0.5)  # one that looks again waits for the lock; one that gave up has answered
        return add(batch, contexts, identities, by_task)

    monkeypatch.setattr(memory._Batch, "add", add_with_a_lookup_midway)
    links.remember(_context(2), RolloutIdentity(task_index=1, rollout_index=0))
    assert links.evictions == 0  # (a read that seals)
    for lookup in lookups:
        lookup.join()
    assert len(found) == 1 and found[0] is not None and found[0][0].span_id == 3


def test_a_plain_batch_indexes_each_dispatch_under_the_key_a_lookup_makes() -> None:
    """A plain batch makes its index keys at C speed: the same key ``_index_key`` makes for each
    dispatch's indices, at the edges of what a plain batch holds too."""
    from gym_instrument.compat import span_context
    from gym_instrument.link import memory

    pairs = [(0, 0), (1, 0), (0, 1), (7, 3), (2**40 - 1, 0), (2**40 - 1, 2**16 - 1), (123_456_789, 65_535), (5, 2**15)]
    batch = memory._Batch()
    kept = batch.add(
        [span_context(number + 1, number + 1, True) for number in range(len(pairs))],
        [RolloutIdentity(task_index=task, rollout_index=rollout) for task, rollout in pairs],
        False,
    )
    assert kept == len(pairs) and batch.plain
    assert list(batch.primaries(0)) == [memory._index_key(task, rollout) for task, rollout in pairs]
    assert list(batch.primaries(3)) == [memory._index_key(task, rollout) for task, rollout in pairs[3:]]
    assert len(set(batch.primaries(0))) == len(pairs)
