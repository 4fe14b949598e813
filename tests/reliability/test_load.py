"""Load and concurrency: 10,000 concurrent asyncio rollouts with verify inside each and a health
pass after; 8 threads dispatching at once. Every span must belong to its own call."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gym_instrument import semconv

from . import pipeline
from .support import Sink, instrumented

ROLLOUTS = 10_000
REPEATS = 4
RETRIED_EVERY = 50  # every 50th rollout is dispatched again as attempt 1: the retry must win
THREADS = 8
PER_THREAD = 400


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows, so their calls really interleave."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def rollout_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = [
        {
            "_ng_task_index": index // REPEATS,
            "_ng_rollout_index": index % REPEATS,
            "agent_ref": {"name": f"agent-{index % 3}"},
            "task_id": {"taskset": "load", "index": index // REPEATS},
        }
        for index in range(ROLLOUTS)
    ]
    retries = [{**row, "_ng_attempt_index": 1} for row in rows[::RETRIED_EVERY]]
    return rows, retries


def indices_of(rollout_id: str) -> tuple[int, int]:
    task_index, rollout_index, *_attempt = rollout_id.split("-")
    return int(task_index), int(rollout_index)


def test_ten_thousand_concurrent_rollouts_verify_inside_and_a_health_pass_after() -> None:
    sink = Sink()
    rows, retries = rollout_rows()

    async def collect() -> tuple[list[Any], Any]:
        client = pipeline.ServerClient(pipeline.ScoringServer(), yields=3)
        results = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in rows))
        # A resumed run dispatches some rollouts again, as attempt 1, all at once.
        retried = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in retries))
        health = await asyncio.to_thread(pipeline.run_health_checks, results)  # one row per rollout
        return list(results) + list(retried), health

    with instrumented(sink, pipeline.targets()):
        results, health = asyncio.run(collect())

    for row, result in zip(rows + retries, results, strict=True):
        assert result["reward"] == pipeline.expected_reward(row["_ng_task_index"], row["_ng_rollout_index"])
    dispatches = sink.spans(semconv.SPAN_DISPATCH)
    verifies = sink.spans(semconv.SPAN_VERIFY)
    healths = sink.spans(semconv.SPAN_HEALTH)
    assert len(dispatches) == len(verifies) == ROLLOUTS + len(retries)
    assert len(healths) == ROLLOUTS == len(health.rollouts)

    dispatch_by_span = {span.context.span_id: span for span in dispatches}
    assert len(dispatch_by_span) == len(dispatches)
    assert Counter(span.attributes[semconv.ROLLOUT_ID] for span in dispatches).most_common(1)[0][1] == 1

    wrong_verify = 0
    for verify in verifies:
        parent = dispatch_by_span[verify.parent.span_id]
        rollout_id = verify.attributes[semconv.ROLLOUT_ID]  # from the baggage of the dispatch it ran in
        wrong_verify += rollout_id != parent.attributes[semconv.ROLLOUT_ID]
        wrong_verify += verify.attributes[semconv.ROLLOUT_REWARD] != pipeline.expected_reward(*indices_of(rollout_id))
    assert wrong_verify == 0

    retried = {(row["_ng_task_index"], row["_ng_rollout_index"]) for row in retries}
    wrong_health = 0
    for span in healths:
        parent = dispatch_by_span[span.parent.span_id]
        assert span.context.trace_id == parent.context.trace_id
        task_index, rollout_index = indices_of(span.attributes[semconv.ROLLOUT_ID])
        wrong_health += (parent.attributes[semconv.TASK_INDEX], parent.attributes[semconv.ROLLOUT_REPEAT]) != (
            task_index,
            rollout_index,
        )
        wrong_health += parent.attributes[semconv.ROLLOUT_ID] != span.attributes[semconv.ROLLOUT_ID]
        attempt = parent.attributes.get(semconv.ROLLOUT_ATTEMPT, 0)
        wrong_health += attempt != (1 if (task_index, rollout_index) in retried else 0)  # the retry won
        expected = pipeline.digest({"_ng_task_index": task_index, "_ng_rollout_index": rollout_index})
        wrong_health += span.attributes[semconv.HEALTH_VERDICT] != expected.verdict
        wrong_health += list(span.attributes[semconv.HEALTH_CHECKS]) != sorted({f["check"] for f in expected.findings})
    assert wrong_health == 0
    assert len({span.parent.span_id for span in healths}) == ROLLOUTS  # at most one per dispatch
    assert sink.metric_total(semconv.METRIC_REWARDED) == len(verifies)


def test_eight_threads_dispatching_synchronously(busy_switching: None) -> None:
    sink = Sink()
    server = pipeline.ScoringServer()
    client = pipeline.ServerClient(server)

    def work(thread: int) -> list[Any]:
        results = []
        for position in range(PER_THREAD):
            row = {
                "_ng_task_index": thread * 10_000 + position,
                "_ng_rollout_index": position % 5,
                "agent_ref": {"name": f"thread-{thread}"},
                "problem_id": f"problem-{thread}-{position}",
            }
            results.append((row, client.post_sync("agent", "/run", json=row)))
        # Each thread runs its own health pass while the others still dispatch.
        pipeline.run_health_checks([result for _row, result in results])
        return results

    with instrumented(sink, pipeline.targets()):
        per_thread = pipeline.run_in_threads(THREADS, work)

    calls = [pair for results in per_thread for pair in results]
    for row, result in calls:
        assert result["reward"] == pipeline.expected_reward(row["_ng_task_index"], row["_ng_rollout_index"])
    dispatches = sink.spans(semconv.SPAN_DISPATCH)
    assert len(dispatches) == len(sink.spans(semconv.SPAN_VERIFY)) == len(sink.spans(semconv.SPAN_HEALTH)) == THREADS * PER_THREAD

    rows_by_task = {row["_ng_task_index"]: row for row, _result in calls}
    for span in dispatches:
        row = rows_by_task[span.attributes[semconv.TASK_INDEX]]
        assert dict(span.attributes) == {
            semconv.TASK_ID: row["problem_id"],
            semconv.TASK_INDEX: row["_ng_task_index"],
            semconv.ROLLOUT_REPEAT: row["_ng_rollout_index"],
            semconv.ROLLOUT_ID: f"{row['_ng_task_index']}-{row['_ng_rollout_index']}",
            semconv.AGENT_NAME: row["agent_ref"]["name"],
        }
    by_span = {span.context.span_id: span for span in dispatches}
    for verify in sink.spans(semconv.SPAN_VERIFY):
        parent = by_span[verify.parent.span_id]
        assert verify.attributes[semconv.ROLLOUT_ID] == parent.attributes[semconv.ROLLOUT_ID]
        assert verify.attributes[semconv.ROLLOUT_REWARD] == pipeline.expected_reward(
            parent.attributes[semconv.TASK_INDEX], parent.attributes[semconv.ROLLOUT_REPEAT]
        )
    for health in sink.spans(semconv.SPAN_HEALTH):
        assert by_span[health.parent.span_id].attributes[semconv.ROLLOUT_ID] == health.attributes[semconv.ROLLOUT_ID]
