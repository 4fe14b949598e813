"""SPEC section 5: metrics with bounded attributes only; attribute values an exporter can encode."""

from __future__ import annotations

import asyncio
from typing import Any

from gym_instrument import semconv
from gym_instrument.record import clean_value


def test_rewarded_total_counts_verifies_with_a_reward(pipeline: Any, telemetry: Any) -> None:
    for result in (
        {"reward": 1.0},
        {"reward": 0.0},
        {"reward": True},
        {"reward": 1.0, "mask_sample": True},
        {"reward": float("nan")},
    ):
        pipeline.score({"result": result})
    (point,) = telemetry.metric_points(semconv.METRIC_REWARDED)
    assert point.value == 2
    assert dict(point.attributes) == {}


def test_dispatches_by_outcome(pipeline: Any, telemetry: Any) -> None:
    client = pipeline.ServerClient()

    async def run() -> None:
        await client.post("agent", "/run", json={"_ng_task_index": 0, "_ng_rollout_index": 0})
        try:
            await client.post("agent", "/run", json={"_ng_task_index": 0, "_ng_rollout_index": 1, "fail": True})
        except ConnectionError:
            pass

    asyncio.run(run())
    points = {point.attributes[semconv.OUTCOME]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert points == {"ok": 1, "error": 1}


def test_metric_attribute_sets_stay_bounded(pipeline: Any, telemetry: Any) -> None:
    rows = [{"task_id": f"task-{n}", "_ng_task_index": n, "_ng_rollout_index": 0} for n in range(300)]
    for row in rows:
        pipeline.send_row(row)
        pipeline.score(
            {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": 0, "result": {"reward": row["_ng_task_index"] / 300}}
        )
    pipeline.run_health_checks(
        [{"task_index": n, "rollout_index": 0, "verdict": ("healthy", "unhealthy", f"free text {n}")[n % 3]} for n in range(300)]
    )
    attribute_sets = {
        name: {tuple(sorted(point.attributes.items())) for point in telemetry.metric_points(name)}
        for name in (semconv.METRIC_REWARDED, semconv.METRIC_DISPATCHES, semconv.METRIC_VERDICTS)
    }
    assert attribute_sets[semconv.METRIC_REWARDED] == {()}
    assert attribute_sets[semconv.METRIC_DISPATCHES] == {(("outcome", "ok"),)}
    assert attribute_sets[semconv.METRIC_VERDICTS] == {
        (("verdict", "healthy"),),
        (("verdict", "unhealthy"),),
        (("verdict", "other"),),
    }
    assert telemetry.metric_total(semconv.METRIC_VERDICTS) == 300


def test_values_an_exporter_cannot_encode_are_dropped_or_converted() -> None:
    assert clean_value("ok") == "ok"
    assert clean_value("lone \ud800 surrogate") == "lone ? surrogate"
    assert clean_value(2**63) is None and clean_value(2**63 - 1) == 2**63 - 1 and clean_value(-(2**63)) == -(2**63)
    assert clean_value(["a", "b"]) == ("a", "b")
    assert clean_value(["a", 1]) is None
    assert clean_value([1, 2**64]) is None
    assert clean_value({"a": 1}) is None and clean_value(object()) is None and clean_value(b"bytes") is None
    assert clean_value(True) is True and clean_value(1.5) == 1.5
