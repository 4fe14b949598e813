"""The ``hand`` configuration (``gym_harness.bench.hand``): the check that hand and gym exported the same spans per
rollout, and the hand-written patch as the run installs it, armed in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gym_harness.bench import hand
from gym_harness.bench.hand import likeness

REPO = Path(__file__).resolve().parent.parent


def _span(trace: str, span: str, name: str, kind: int, attributes: dict[str, Any], parent: str = "") -> dict[str, Any]:
    """A span as oteltap prints it (OTLP/JSON)."""
    pairs = [{"key": key, "value": {"stringValue": str(value)}} for key, value in attributes.items()]
    return {"traceId": trace, "spanId": span, "parentSpanId": parent, "name": name, "kind": kind, "attributes": pairs}


def _rollout(prefix: str, rollout_id: str, reward: float, verify_keys: tuple[str, ...] = ("nemo.gym.rollout.reward",)) -> list:
    """One rollout's trace: dispatch, model call, verify, health; ids and values differ by ``prefix`` and ``reward``."""
    trace = f"{prefix}-{rollout_id}"
    dispatch = {"nemo.gym.rollout.id": rollout_id, "nemo.gym.task.index": 0, "gen_ai.usage.input_tokens": 20}
    return [
        _span(trace, "d", "gym.rollout.dispatch", 1, dispatch),
        _span(trace, "c", "chat", 3, {"gen_ai.operation.name": "chat", "nemo.gym.rollout.id": rollout_id}, "d"),
        _span(trace, "v", "gym.verify", 1, {"nemo.gym.rollout.id": rollout_id, **dict.fromkeys(verify_keys, reward)}, "d"),
        _span(trace, "h", "gym.rollout.health", 1, {"nemo.gym.health.verdict": "healthy"}, "d"),
    ]


def test_rollouts_whose_traces_hold_the_same_spans_are_alike_whatever_their_ids_and_values() -> None:
    hand_spans = likeness.rollout_spans([*_rollout("h1", "0-0", 1.0), *_rollout("h1", "0-1", 0.0), *_rollout("h2", "0-0", 0.0)])
    gym_spans = likeness.rollout_spans([*_rollout("g1", "0-0", 0.0), *_rollout("g1", "0-1", 1.0), *_rollout("g2", "0-0", 1.0)])
    assert likeness.differences("hand", hand_spans, "gym", gym_spans) == []
    [line] = likeness.same_lines("hand", hand_spans, "gym", gym_spans)
    assert line.startswith("**Same spans, checked**")
    assert "for each of 2 rollouts, hand's traces (3) and gym's (3)" in line
    assert "gym.verify (INTERNAL): nemo.gym.rollout.id, nemo.gym.rollout.reward" in line
    assert "chat (CLIENT): gen_ai.operation.name, nemo.gym.rollout.id" in line
    assert "Spans outside any rollout's trace: hand none; gym none." in line


def test_a_missing_attribute_an_extra_span_or_an_untraced_rollout_is_a_difference() -> None:
    gym_spans = likeness.rollout_spans([*_rollout("g", "0-0", 1.0), *_rollout("g", "0-1", 1.0)])
    # hand's verify of 0-1 without its reward: that rollout, and only it, differs.
    missing = likeness.rollout_spans([*_rollout("h", "0-0", 1.0), *_rollout("h", "0-1", 1.0, verify_keys=())])
    [problem] = likeness.differences("hand", missing, "gym", gym_spans)
    assert problem.startswith("rollout 0-1: hand ") and "gym.verify (INTERNAL): nemo.gym.rollout.id;" in problem
    [line] = likeness.same_lines("hand", missing, "gym", gym_spans)
    assert line.startswith("**hand and gym did NOT export the same spans per rollout**")
    # A second model call in one trace (the shapes are multisets: a set of names would not see it).
    doubled = [*_rollout("h", "0-0", 1.0), *_rollout("h", "0-1", 1.0)]
    doubled.append(_span("h-0-1", "c2", "chat", 3, {"gen_ai.operation.name": "chat", "nemo.gym.rollout.id": "0-1"}, "d"))
    [problem] = likeness.differences("hand", likeness.rollout_spans(doubled), "gym", gym_spans)
    assert problem.startswith("rollout 0-1:")
    # A rollout one of them never traced.
    [problem] = likeness.differences("hand", likeness.rollout_spans(_rollout("h", "0-0", 1.0)), "gym", gym_spans)
    assert problem == "rollouts traced by gym only: 0-1"


def test_spans_outside_every_rollout_are_compared_and_the_metrics_reported() -> None:
    head_server = _span("other", "x", "GET /global_config_dict_yaml", 2, {"http.route": "/global_config_dict_yaml"})
    hand_spans = likeness.rollout_spans([*_rollout("h", "0-0", 1.0), head_server])
    gym_spans = likeness.rollout_spans(_rollout("g", "0-0", 1.0))
    assert hand_spans.outside == {"GET /global_config_dict_yaml": 1} and hand_spans.traces == 1
    [problem] = likeness.differences("hand", hand_spans, "gym", gym_spans)
    assert problem == "spans outside any rollout: hand {'GET /global_config_dict_yaml': 1}, gym {}"

    hand_spans = likeness.rollout_spans(_rollout("h", "0-0", 1.0))
    rewarded = {"name": "gym.rollout.rewarded_total", "sum": {"dataPoints": [{"attributes": [], "asInt": 3}]}}
    verdicts = {
        "name": "gym.rollout.verdicts",
        "sum": {"dataPoints": [{"attributes": [{"key": "verdict", "value": {"stringValue": "healthy"}}], "asInt": 3}]},
    }
    ray = {"name": "ray_gcs_storage_operation_latency_ms", "histogram": {"dataPoints": [{"attributes": []}]}}
    hand_spans.metrics = likeness.metric_shapes([rewarded, verdicts, ray])
    gym_spans.metrics = likeness.metric_shapes([rewarded])
    assert hand_spans.metrics == {("gym.rollout.rewarded_total", ()), ("gym.rollout.verdicts", ("verdict",))}
    # Reported, not judged: a server's metrics come on the SDK's 60 s timer, which a short run can end before.
    assert likeness.differences("hand", hand_spans, "gym", gym_spans) == []
    [line] = likeness.same_lines("hand", hand_spans, "gym", gym_spans)
    assert line.endswith(
        "hand `gym.rollout.rewarded_total` (no attributes), `gym.rollout.verdicts` (verdict); "
        "gym `gym.rollout.rewarded_total` (no attributes)."
    )
    gym_spans.metrics = set(hand_spans.metrics)
    [line] = likeness.same_lines("hand", hand_spans, "gym", gym_spans)
    assert line.endswith("the same in both: `gym.rollout.rewarded_total` (no attributes), `gym.rollout.verdicts` (verdict).")


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"  # compact, as oteltap prints it


def test_metric_lines_are_read_from_an_offset_exemplars_and_all(tmp_path: Path) -> None:
    path = tmp_path / "received.ndjson"
    before = _line({"name": "gym.rollout.dispatches", "sum": {"dataPoints": [{"attributes": []}]}})
    exemplar = {"spanId": "ab", "traceId": "cd", "value": {"asInt": 1}}
    rewarded = {"name": "gym.rollout.rewarded_total", "sum": {"dataPoints": [{"attributes": [], "exemplars": [exemplar]}]}}
    after = (
        _line(_span("t", "s", "gym.verify", 1, {})) + _line(rewarded) + '{"name":"gym.rollout.verdicts","sum":'
    )  # the last still being written
    path.write_text("oteltap listening\n" + before + after)
    start = len(("oteltap listening\n" + before).encode())
    assert likeness.metric_shapes(likeness.metric_objects(path, start)) == {("gym.rollout.rewarded_total", ())}


def _fake_nemo_gym(root: Path) -> None:
    """A ``nemo_gym.rollout_health`` whose health pass returns the verdicts it is given (the real one reads a run's files)."""
    package = root / "nemo_gym"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rollout_health.py").write_text(
        "def run_health_checks(digests):\n"
        '    """NeMo Gym\'s health pass (here: its verdicts as given)."""\n'
        "    from types import SimpleNamespace\n"
        "    return SimpleNamespace(rollouts=digests)\n"
    )


def test_the_patch_arms_once_where_its_variable_is_set_and_makes_health_spans_under_their_dispatch(tmp_path: Path) -> None:
    site, modules = tmp_path / "site", tmp_path / "modules"
    site.mkdir()
    modules.mkdir()
    _fake_nemo_gym(modules)
    hand.install(Path(sys.executable), site)
    assert list((site / "__pycache__").glob(f"{hand.MODULE}.*.pyc"))  # compiled, PYTHONDONTWRITEBYTECODE or not
    code = f"""
import site, sys
site.addsitedir({str(site)!r})
site.addsitedir({str(site)!r})  # a venv's site-packages read twice (lib and its lib64 link), its .pth with it
print({hand.MODULE!r} in sys.modules, sum(type(f).__name__ == "_PatchOnImport" for f in sys.meta_path))
if {hand.MODULE!r} not in sys.modules:
    raise SystemExit
sys.path.insert(0, {str(modules)!r})
from types import SimpleNamespace
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

import nemo_gym.rollout_health as health  # imported after arming: patched as it loads, once
import {hand.MODULE} as patch
print(health.run_health_checks.__wrapped__.__module__, hasattr(health.run_health_checks.__wrapped__, "__wrapped__"))
row = {{"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 1, "task_id": "t", "agent_ref": {{"name": "a"}}}}
attributes = patch.dispatch_attributes(row)
dispatch = provider.get_tracer("t").start_span("gym.rollout.dispatch", attributes=attributes)
patch._end_dispatch(dispatch, attributes, "ok")
finding = SimpleNamespace(check="b_check")
findings = [finding, SimpleNamespace(check="a_check"), finding]
digest = SimpleNamespace(task_index=3, rollout_index=1, verdict="unhealthy", findings=findings)
stranger = SimpleNamespace(task_index=9, rollout_index=0, verdict="healthy", findings=[])
health.run_health_checks([digest, stranger])
health.run_health_checks([digest])  # a second pass over the same run: nothing more
spans = [s for s in exporter.get_finished_spans() if s.name == "gym.rollout.health"]
parent = dispatch.get_span_context()
print(len(spans), spans[0].parent.span_id == parent.span_id, spans[0].context.trace_id == parent.trace_id)
print(sorted(spans[0].attributes.items()))
"""
    inert = {k: v for k, v in os.environ.items() if k != hand.ACTIVE_VAR}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=inert, check=True)
    assert done.stdout.strip() == "False 0"  # without the variable the .pth imports nothing
    armed = {**inert, hand.ACTIVE_VAR: "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=armed, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[:3] == ["True 1", "nemo_gym.rollout_health False", "1 True True"]
    assert lines[3] == str(
        sorted(
            {
                "nemo.gym.health.checks": ("a_check", "b_check"),  # sorted, distinct
                "nemo.gym.health.verdict": "unhealthy",
                "nemo.gym.rollout.id": "3-1-a1",  # the dispatch's, attempt and all
            }.items()
        )
    )
    hand.remove(site)
    assert [path.name for path in site.rglob("*") if hand.MODULE in path.name] == []  # bytecode too
