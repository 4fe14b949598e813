"""``make demo``: run the demo rollout pipeline under ``opentelemetry-instrument``, keep what it made,
and show what its spans and metrics say: one row per rollout, a summary per task, the report.

The pipeline (``rollout_pipeline.py``) has no telemetry code: the launcher finds the ``gym``
instrumentor, which wraps the functions named in ``OTEL_PYTHON_GYM_TARGETS``. Spans and metrics
go to the package's OTLP/JSON file exporter (``OTEL_TRACES_EXPORTER=gym_json_file``, the one the
quick start uses), which appends them to the file ``OTEL_PYTHON_GYM_JSON_FILE`` names:
``demo/output/spans.otlp.jsonl``. Everything stays in ``demo/output/`` (git-ignored): the spans,
the pipeline's ``rollouts.jsonl`` and ``report.html``. The command that made the spans is printed
as it ran, so it can be run by hand.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUTPUT = HERE / "output"
SPANS_FILE = "spans.otlp.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
REPORT_FILE = "report.html"
TARGETS = ",".join(
    [
        "rollout_pipeline:Collector.dispatch=dispatch@nemo_gym",
        "rollout_pipeline:ResourcesServer.verify=verify@nemo_gym",
        "rollout_pipeline:run_health_checks=health@nemo_gym",
    ]
)

sys.path.insert(0, str(REPO))  # run as a script from a checkout: the package beside this folder

from gym_instrument.tools.report import build_report, write_html  # noqa: E402
from gym_instrument.tools.report.otlp import ReadStats, Span, read_spans  # noqa: E402
from gym_instrument.tools.report.text import (  # noqa: E402
    TASK_HEADER,
    infra_line,
    kinds_text,
    render_table,
    rollouts_line,
    task_rows,
    wall_and_tokens_line,
)


def _shown(path: Path) -> str:
    """A path as the command shows it: relative to the repository when it is inside it."""
    absolute = Path(os.path.abspath(path))  # not resolve(): a venv's python is a symlink to keep as it is
    try:
        return str(absolute.relative_to(REPO))
    except ValueError:
        return str(absolute)


def pipeline_command(output: Path, exporting: dict[str, str] | None = None) -> str:
    """The shell command that runs the pipeline traced, as printed and as run (from the repository root).

    ``exporting`` adds or overrides variables: ``make demo-ui`` sends the spans to a trace viewer too.
    """
    environment = {
        "PYTHONPATH": _shown(HERE),
        "OTEL_SERVICE_NAME": "demo-rollouts",
        "OTEL_PYTHON_GYM_TARGETS": TARGETS,
        "OTEL_TRACES_EXPORTER": "gym_json_file",
        "OTEL_METRICS_EXPORTER": "gym_json_file",
        "OTEL_PYTHON_GYM_JSON_FILE": _shown(output / SPANS_FILE),
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # one export, at shutdown
        "OTEL_LOGS_EXPORTER": "none",
        **(exporting or {}),
    }
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    words = [
        *(f"{name}={shlex.quote(value)}" for name, value in environment.items()),
        shlex.quote(_shown(launcher)),
        shlex.quote(_shown(Path(sys.executable))),
        shlex.quote(_shown(HERE / "run_pipeline.py")),
        shlex.quote(_shown(output / ROLLOUTS_FILE)),
    ]
    return " ".join(words)


def run_pipeline(output: Path, exporting: dict[str, str] | None = None) -> tuple[Path, Path, str]:
    """Run the traced pipeline into ``output``; the spans file, the rollouts file and the command."""
    output.mkdir(parents=True, exist_ok=True)
    for name in (SPANS_FILE, ROLLOUTS_FILE, REPORT_FILE):
        (output / name).unlink(missing_ok=True)
    command = pipeline_command(output, exporting)
    # The command sets every variable it needs; the caller's other OTEL_* settings are left out here.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    process = subprocess.run(["/bin/sh", "-c", command], env=environment, capture_output=True, text=True, timeout=300, cwd=REPO)
    if process.stderr.strip():
        print(process.stderr.strip())
    if process.returncode != 0:
        raise SystemExit(f"the pipeline failed with exit code {process.returncode}")
    return output / SPANS_FILE, output / ROLLOUTS_FILE, command


def spans_of(spans_file: Path) -> list[Span]:
    return list(read_spans([spans_file], ReadStats(), progress=False))


def metric_points(spans_file: Path, name: str) -> list[dict[str, Any]]:
    """The data points of one metric in the file's ``resourceMetrics`` lines (attributes decoded)."""
    from gym_instrument.tools.report.otlp import attributes

    points = []
    for line in spans_file.read_text().splitlines():
        batch = json.loads(line) if line.strip() else {}
        for resource in batch.get("resourceMetrics", []):
            for scope in resource.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    if metric.get("name") != name:
                        continue
                    for kind in ("sum", "gauge"):
                        for point in metric.get(kind, {}).get("dataPoints", []):
                            value = point.get("asInt", point.get("asDouble", 0))
                            points.append({"attributes": attributes(point.get("attributes")), "value": float(value)})
    return points


def _duration(span: Span) -> str:
    return f"{(span.end_ns - span.start_ns) / 1e6:.1f} ms"


def table(spans: list[Span]) -> list[list[str]]:
    """One row per dispatch: what its own span, its verify span and its health span say."""
    dispatches = [span for span in spans if span.name == "gym.rollout.dispatch"]
    verifies = {span.parent_span_id: span for span in spans if span.name == "gym.verify"}
    health = {span.parent_span_id: span for span in spans if span.name == "gym.rollout.health"}
    rows = []
    for dispatch in sorted(
        dispatches,
        key=lambda s: (s.attributes.get("nemo.gym.task.index", 0), s.attributes.get("nemo.gym.rollout.repeat", 0), s.start_ns),
    ):
        attributes = dispatch.attributes
        verify = verifies[dispatch.span_id].attributes if dispatch.span_id in verifies else {}
        verdict = health[dispatch.span_id].attributes if dispatch.span_id in health else {}
        failed = dispatch.status_code == 2
        reward = verify.get("nemo.gym.rollout.reward")
        if failed:
            reward_text = f"error: {attributes.get('error.type', '?').rsplit('.', 1)[-1]}"
        elif reward is not None:
            reward_text = f"{reward:.1f}"
        elif verify.get("nemo.gym.verify.masked"):
            reward_text = "(masked)"
        else:
            reward_text = f"(none: {verify.get('nemo.gym.failure_kind', 'not numeric')})"
        rows.append(
            [
                attributes.get("nemo.gym.task.id") or f"#{attributes.get('nemo.gym.task.index', '?')}",  # as the report names it
                str(attributes.get("nemo.gym.rollout.repeat", "-")),
                attributes.get("nemo.gym.rollout.id", "-"),
                reward_text,
                verdict.get("nemo.gym.health.verdict", "-" if failed else "(none)"),
                ", ".join(verdict.get("nemo.gym.health.checks", [])) or "-",
                _duration(dispatch),
                dispatch.trace_id[:12] + "…",
            ]
        )
    return rows


HEADER = ["task id", "repeat", "rollout id", "reward", "verdict", "failed checks", "duration", "trace id"]


def main(output: Path = OUTPUT, exporting: dict[str, str] | None = None, trace_url: str | None = None) -> list[Span]:
    """Run, print and keep the demo; the package's spans it exported (``make demo-ui`` picks a rollout from them)."""
    spans_file, rollouts_file, command = run_pipeline(output, exporting)
    spans = spans_of(spans_file)
    rollouts = [json.loads(line) for line in rollouts_file.read_text().splitlines()]
    print()
    print(render_table(HEADER, table(spans)))
    print()
    counts = {
        name: sum(1 for span in spans if span.name == name)
        for name in ("gym.rollout.dispatch", "gym.verify", "gym.rollout.health")
    }
    print(f"spans exported: {counts}; rollouts in rollouts.jsonl: {len(rollouts)}")
    rewarded = sum(point["value"] for point in metric_points(spans_file, "gym.rollout.rewarded_total"))
    outcomes = {
        point["attributes"].get("outcome"): int(point["value"]) for point in metric_points(spans_file, "gym.rollout.dispatches")
    }
    verdicts = {
        point["attributes"].get("verdict"): int(point["value"]) for point in metric_points(spans_file, "gym.rollout.verdicts")
    }
    print(f"metrics: gym.rollout.rewarded_total={rewarded:g}  gym.rollout.dispatches={outcomes}  gym.rollout.verdicts={verdicts}")
    print("Each health span is a child of its (already ended) dispatch span, in the same trace; the retried")
    print("rollout's verdict went to its second attempt (rollout id with -a1).")

    figures = build_report([spans_file], trace_url=trace_url)
    report = write_html(figures, output / REPORT_FILE, title="gym-instrument demo run")
    run = figures["run"]
    print()
    print(infra_line(figures["infra_failures"]))
    print(rollouts_line(figures))
    print(wall_and_tokens_line(figures))
    print(
        f"per task (reward >= 1 is a success; pass@k over the repeats; mean {run['mean_reward']:.2f},"
        f" success {run['success_rate']:.0%}, {run['zero_variance_groups']} of {run['groups']} groups with all rewards equal):"
    )
    print(render_table(TASK_HEADER, task_rows(figures["tasks"])))
    print()
    print(f"kept in {_shown(output)}/: {SPANS_FILE} (OTLP/JSON spans and metrics), {ROLLOUTS_FILE}, {REPORT_FILE}")
    print("the traced run, by hand (from the repository root):")
    print(f"  {command}")
    print("and its report:")
    gym_instrument = Path(sys.executable).parent / "gym-instrument"
    trace_url_option = f" --trace-url {shlex.quote(trace_url)}" if trace_url else ""
    print(
        f"  {shlex.quote(_shown(gym_instrument))} report {shlex.quote(_shown(spans_file))} --html {shlex.quote(_shown(report))}"
        + trace_url_option
    )
    infra = figures["infra_failures"]
    if infra["over_limit"]:
        print(f"  (exit code 4, and its first line says why: {infra['failures']} of the {infra['rollouts']} rollouts are")
        print(f"  infrastructure failures ({kinds_text(infra['kinds'])}), over --max-infra-failures {infra['limit']:.0%})")
    return spans


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT)
