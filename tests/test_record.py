"""SPEC section 5: metrics with bounded attributes only; attribute values an exporter can encode."""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from gym_instrument import GymInstrumentor, semconv
from gym_instrument.record.attributes import clean_value


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


def test_rewarded_total_counts_rollouts_not_verifies(pipeline: Any, telemetry: Any) -> None:
    # A multi-step rollout scores every step: counted once, at its first rewarded step.
    for step, reward in enumerate((0.0, 0.5, 1.0)):
        pipeline.score({"_ng_rollout_id": "episode-a", "step": step, "result": {"reward": reward}})
    pipeline.score({"_ng_rollout_id": "episode-b", "result": {"reward": 1.0, "mask_sample": True}})  # not rewarded
    pipeline.score({"_ng_rollout_id": "episode-b", "result": {"reward": 1.0}})  # its first rewarded step
    pipeline.score({"_ng_rollout_id": "episode-b", "result": {"reward": 1.0}})
    for _ in range(2):  # no rollout id: each verify counts, as it can name no rollout
        pipeline.score({"result": {"reward": 1.0}})
    assert len(telemetry.spans(semconv.SPAN_VERIFY)) == 8
    (point,) = telemetry.metric_points(semconv.METRIC_REWARDED)
    assert point.value == 4


def test_a_verify_that_failed_is_not_counted_as_rewarded(make_module: Any, instrument: Any, telemetry: Any) -> None:
    from gym_instrument import Target

    def failed_with_a_reward(call: Any) -> dict[str, Any]:  # a scorer that reports its failure as data
        return {semconv.ROLLOUT_REWARD: 0.0, semconv.ERROR_TYPE: "timeout"}

    name = make_module()
    instrument(targets=[Target(f"{name}:score", "verify", extractors=[failed_with_a_reward])])
    importlib.import_module(name).score({"result": {"reward": 1.0}})
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.attributes[semconv.ERROR_TYPE] == "timeout"
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == 0


def test_the_rewarded_rollouts_remembered_stay_under_their_bound_in_bytes_whatever_the_ids() -> None:
    from gym_instrument.record.metrics import RewardedRollouts

    bound = 8 << 20  # as docs/reliability.md says
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rewarded = RewardedRollouts()
        tracemalloc.reset_peak()
        # 100,000 ids of 2 KiB (200 MB of ids): each is made, scored and let go.
        for number in range(100_000):
            assert rewarded.first(f"{number:08d}-" + "x" * 2048)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held - before <= bound
    assert peak - before <= bound + 8192  # (the id being scored)
    assert held - before >= bound // 2  # the bound is used, not far undershot
    assert (RewardedRollouts.MAX_BYTES, rewarded.capacity) == (bound, 26_214)  # as the docs say


def test_a_rollout_still_scoring_while_many_others_arrive_is_counted_once(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    name = make_module()
    instrument(targets=[f"{name}:score=verify@nemo_gym"], tracer_provider=TracerProvider())  # (spans not kept)
    score = importlib.import_module(name).score
    others = 80_000  # more than any bound of the memory holds (65,536 ids once)
    for number in range(others):
        if number % 1_000 == 0:  # the long rollout's next step, between the others' verifies
            score({"_ng_rollout_id": "the-long-episode", "result": {"reward": 0.5}})
        score({"_ng_rollout_id": f"episode-{number}", "result": {"reward": 1.0}})
    score({"_ng_rollout_id": "the-long-episode", "result": {"reward": 1.0}})
    assert telemetry.metric_total(semconv.METRIC_REWARDED) == others + 1


def test_the_rewarded_rollouts_remembered_are_evicted_by_last_use() -> None:
    from gym_instrument.record.metrics import RewardedRollouts

    rewarded = RewardedRollouts(max_bytes=2 * RewardedRollouts.ENTRY_BYTES)  # room for two
    assert rewarded.capacity == 2
    # "a" scored again moves to the newest end: "c" evicts "b", the least recently scored.
    seen = [rewarded.first(rollout_id) for rollout_id in ("a", "b", "a", "c", "a", "b")]
    assert seen == [True, True, False, True, False, True]


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


SEND = "def send_row(row):\n    return {'reward': 1.0}\n"


def test_counts_go_on_across_uninstrument_and_instrument(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """The counters are cumulative: a second instrument() with the same meter provider counts on from
    where the first stopped, and what was counted before stays counted."""
    module = importlib.import_module(make_module(SEND))
    instrument(targets=[f"{module.__name__}:send_row=dispatch"])
    for index in range(2):
        module.send_row({"_ng_task_index": index, "_ng_rollout_index": 0})
    first = {point.attributes[semconv.OUTCOME]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    GymInstrumentor().uninstrument()
    module.send_row({"_ng_task_index": 9, "_ng_rollout_index": 0})  # not instrumented: not counted
    instrument(targets=[f"{module.__name__}:send_row=dispatch"])
    for index in range(3):
        module.send_row({"_ng_task_index": index, "_ng_rollout_index": 1})
    points = {point.attributes[semconv.OUTCOME]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert (first, points) == ({"ok": 2}, {"ok": 5})


PROXY_SCRIPT = """
import json
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from gym_instrument import GymInstrumentor

GymInstrumentor().instrument(targets=["loop:send_row=dispatch"], presets="none")  # no provider set yet
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
trace.set_tracer_provider(TracerProvider())
import loop
for index in range(3):
    loop.send_row({"_ng_task_index": index, "_ng_rollout_index": 0})
points = {}
for resource in reader.get_metrics_data().resource_metrics:
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            points[metric.name] = [[dict(p.attributes), p.value] for p in metric.data.data_points]
print(json.dumps(points))
"""


def test_counts_reach_a_global_meter_provider_set_after_instrument(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(SEND)
    process = subprocess.run(
        [sys.executable, "-c", PROXY_SCRIPT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert process.returncode == 0, process.stderr
    points = json.loads(process.stdout.strip().splitlines()[-1])
    assert points[semconv.METRIC_DISPATCHES] == [[{"outcome": "ok"}, 3]]


def _child_counts(sender: Any, module_name: str, telemetry: Any) -> None:
    module = importlib.import_module(module_name)
    module.send_row({"_ng_task_index": 50, "_ng_rollout_index": 0})
    points = telemetry.metric_points(semconv.METRIC_DISPATCHES)
    sender.send({point.attributes[semconv.OUTCOME]: point.value for point in points})
    sender.close()


def test_a_forked_child_counts_only_its_own_calls(make_module: Any, instrument: Any, telemetry: Any) -> None:
    """A forked child's counters start from zero: the parent's counts are the parent's to report."""
    import multiprocessing

    module = importlib.import_module(make_module(SEND))
    instrument(targets=[f"{module.__name__}:send_row=dispatch"])
    for index in range(2):
        module.send_row({"_ng_task_index": index, "_ng_rollout_index": 0})
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child_counts, args=(sender, module.__name__, telemetry))
    child.start()
    sender.close()
    child_counts = receiver.recv()
    child.join(60)
    parent = {point.attributes[semconv.OUTCOME]: point.value for point in telemetry.metric_points(semconv.METRIC_DISPATCHES)}
    assert (child.exitcode, child_counts, parent) == (0, {"ok": 1}, {"ok": 2})
