"""The gym_json_file exporters (tools/export.py): OTLP/JSON lines into the file a setting names,
whatever the program prints on standard output; and the report says what it could not read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_instrument import semconv
from gym_instrument.tools.report import build_report
from gym_instrument.tools.report.text import summary
from tests.test_zero_code import TARGETS, console_metric_points, run_instrumented


def test_spans_and_metrics_go_to_the_named_file_and_stdout_stays_the_programs(tmp_path: Path) -> None:
    spans_file = tmp_path / "out" / "spans.jsonl"  # its folder does not exist yet
    process, _ = run_instrumented(
        tmp_path,
        OTEL_TRACES_EXPORTER="gym_json_file",
        OTEL_METRICS_EXPORTER="gym_json_file",
        OTEL_PYTHON_GYM_JSON_FILE=str(spans_file),
        OTEL_PYTHON_GYM_TARGETS=TARGETS,
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "REWARDS [1.0, 0.0, 1.0, 0.0]"  # the program's output, nothing else
    batches = [json.loads(line) for line in spans_file.read_text().splitlines()]  # every line is JSON
    spans = [
        span
        for batch in batches
        for resource in batch.get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert sorted(span["name"] for span in spans).count(semconv.SPAN_DISPATCH) == 4
    assert any("resourceMetrics" in batch for batch in batches)
    figures = build_report([spans_file])
    assert figures["run"]["dispatches"] == 4 and figures["source"]["unreadable_lines"] == 0


def test_the_report_says_how_many_lines_it_could_not_read(tmp_path: Path) -> None:
    process, _ = run_instrumented(
        tmp_path,
        OTEL_TRACES_EXPORTER="gym_json_file",
        OTEL_PYTHON_GYM_JSON_FILE=str(tmp_path / "spans.jsonl"),
        OTEL_PYTHON_GYM_TARGETS=TARGETS,
    )
    assert process.returncode == 0, process.stderr
    mixed = tmp_path / "mixed.jsonl"  # what the stdout exporter and a printing program make together
    mixed.write_text("REWARDS [1.0]\n" + (tmp_path / "spans.jsonl").read_text() + "progress 50%\n")
    text = summary(build_report([mixed]))
    assert "2 lines could not be read" in text


@pytest.mark.parametrize("where", ["a directory", "a path under a file", "an unwritable folder"])
def test_a_json_file_that_cannot_be_written_is_one_line_and_the_rest_still_runs(tmp_path: Path, where: str) -> None:
    target = {
        "a directory": tmp_path,
        "a path under a file": tmp_path / "main.py" / "spans.jsonl",
        "an unwritable folder": Path("/proc/gym-instrument/spans.jsonl"),  # (root may write anywhere else)
    }[where]
    process, _ = run_instrumented(
        tmp_path,
        OTEL_TRACES_EXPORTER="gym_json_file",
        OTEL_METRICS_EXPORTER="console",
        OTEL_PYTHON_GYM_JSON_FILE=str(target),
        OTEL_PYTHON_GYM_TARGETS=TARGETS,
    )
    assert process.returncode == 0, process.stderr
    assert "Traceback" not in process.stderr and "failed" not in process.stderr
    (line,) = [line for line in process.stderr.splitlines() if line.strip()]
    assert f"OTEL_PYTHON_GYM_JSON_FILE={str(target)!r} cannot be written" in line
    assert "REWARDS [1.0, 0.0, 1.0, 0.0]" in process.stdout  # the program ran, and so did the instrumentation:
    points = console_metric_points(process.stdout)
    assert points[semconv.METRIC_DISPATCHES] == {(("outcome", "ok"),): 4}
    assert points[semconv.METRIC_VERDICTS] == {(("verdict", "healthy"),): 2, (("verdict", "unhealthy"),): 2}
