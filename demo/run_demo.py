"""``make demo``: run the demo rollout pipeline under ``opentelemetry-instrument`` and show what
its spans and metrics say, one row per rollout.

The pipeline (``rollout_pipeline.py``) has no telemetry code: the launcher finds the ``gym``
instrumentor, which wraps the functions named in ``OTEL_PYTHON_GYM_TARGETS``. Spans and metrics
go to the SDK's console exporters; this script reads them back and builds the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TARGETS = ",".join(
    [
        "rollout_pipeline:Collector.dispatch=dispatch",
        "rollout_pipeline:ResourcesServer.verify=verify",
        "rollout_pipeline:run_health_checks=health",
    ]
)


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporters printed, one after another."""
    decoder, objects, index = json.JSONDecoder(), [], text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            index = text.find("{", index + 1)
            continue
        objects.append(value)
        index = text.find("{", end)
    return objects


def run_pipeline(workdir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Path]:
    output = workdir / "rollouts.jsonl"
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
        "PYTHONPATH": str(HERE),
        "OTEL_SERVICE_NAME": "demo-rollouts",
        "OTEL_PYTHON_GYM_TARGETS": TARGETS,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRICS_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # one export, at shutdown
        "OTEL_LOGS_EXPORTER": "none",
    }
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    command = [str(launcher), sys.executable, str(HERE / "run_pipeline.py"), str(output)]
    print("$ OTEL_PYTHON_GYM_TARGETS=... opentelemetry-instrument python demo/run_pipeline.py rollouts.jsonl")
    process = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300, cwd=workdir)
    print(process.stderr.strip())
    if process.returncode != 0:
        raise SystemExit(f"the pipeline failed with exit code {process.returncode}")
    objects = json_objects(process.stdout)
    spans = [item for item in objects if "context" in item and "name" in item]
    metrics = [item for item in objects if "resource_metrics" in item]
    return spans, metrics, output


def metric_points(metrics: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    points = []
    for batch in metrics:
        for resource in batch["resource_metrics"]:
            for scope in resource["scope_metrics"]:
                for metric in scope["metrics"]:
                    if metric["name"] == name:
                        points.extend(metric["data"]["data_points"])
    return points


def table(spans: list[dict[str, Any]]) -> list[list[str]]:
    by_id = {span["context"]["span_id"]: span for span in spans}
    dispatches = [span for span in spans if span["name"] == "gym.rollout.dispatch"]
    verifies = {span["parent_id"]: span for span in spans if span["name"] == "gym.verify"}
    health = {span["parent_id"]: span for span in spans if span["name"] == "gym.rollout.health"}
    rows = []
    for dispatch in sorted(
        dispatches,
        key=lambda s: (
            s["attributes"].get("nemo.gym.task.index", 0),
            s["attributes"].get("nemo.gym.rollout.repeat", 0),
            s["start_time"],
        ),
    ):
        attributes = dispatch["attributes"]
        span_id = dispatch["context"]["span_id"]
        verify = verifies.get(span_id, {}).get("attributes", {})
        verdict = health.get(span_id, {}).get("attributes", {})
        failed = dispatch["status"]["status_code"] == "ERROR"
        reward = verify.get("nemo.gym.rollout.reward")
        if failed:
            reward_text = f"error: {attributes.get('error.type', '?').rsplit('.', 1)[-1]}"
        elif reward is not None:
            reward_text = f"{reward:.1f}"
        elif verify.get("nemo.gym.verify.masked"):
            reward_text = "(masked)"
        else:
            reward_text = f"(none: {verify.get('nemo.gym.failure_kind', 'not numeric')})"
        assert by_id[span_id] is dispatch
        rows.append(
            [
                attributes.get("nemo.gym.task.id", "-"),
                str(attributes.get("nemo.gym.rollout.repeat", "-")),
                attributes.get("nemo.gym.rollout.id", "-"),
                reward_text,
                verdict.get("nemo.gym.health.verdict", "-" if failed else "(none)"),
                ", ".join(verdict.get("nemo.gym.health.checks", [])) or "-",
                dispatch["context"]["trace_id"][2:14] + "…",
            ]
        )
    return rows


def render(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    line = lambda cells: "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * width for width in widths]), *map(line, rows)])


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gym-demo-") as workdir:
        spans, metrics, output = run_pipeline(Path(workdir))
        rollouts = [json.loads(line) for line in output.read_text().splitlines()]
    header = ["task id", "repeat", "rollout id", "reward", "verdict", "failed checks", "trace id"]
    print()
    print(render(header, table(spans)))
    print()
    counts = {
        name: sum(1 for span in spans if span["name"] == name)
        for name in ("gym.rollout.dispatch", "gym.verify", "gym.rollout.health")
    }
    print(f"spans exported: {counts}; rollouts in rollouts.jsonl: {len(rollouts)}")
    rewarded = sum(point["value"] for point in metric_points(metrics, "gym.rollout.rewarded_total"))
    outcomes = {point["attributes"].get("outcome"): point["value"] for point in metric_points(metrics, "gym.rollout.dispatches")}
    verdicts = {point["attributes"].get("verdict"): point["value"] for point in metric_points(metrics, "gym.rollout.verdicts")}
    print(f"metrics: gym.rollout.rewarded_total={rewarded}  gym.rollout.dispatches={outcomes}  gym.rollout.verdicts={verdicts}")
    print("Each health span is a child of its (already ended) dispatch span, in the same trace; the retried")
    print("rollout's verdict went to its second attempt (rollout id with -a1).")


if __name__ == "__main__":
    main()
