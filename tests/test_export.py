"""The gym_json_file exporters (tools/export.py): OTLP/JSON lines into the file a setting names,
whatever the program prints on standard output; and the report says what it could not read."""

from __future__ import annotations

import json
import subprocess
import sys
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


@pytest.mark.parametrize("where", ["a path under a file", "an unwritable folder", "a folder under a file"])
def test_a_json_file_that_cannot_be_written_is_one_line_and_the_rest_still_runs(tmp_path: Path, where: str) -> None:
    target = {
        "a folder under a file": f"{tmp_path / 'main.py' / 'spans'}/",
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


def _span_names(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            for scope in resource["scopeSpans"]:
                names += [span["name"] for span in scope["spans"]]
    return names


@pytest.mark.parametrize("named_as", ["a path ending in /", "an existing directory"])
def test_a_folder_gets_a_file_per_process_and_the_report_reads_them_all(tmp_path: Path, named_as: str) -> None:
    folder = tmp_path / "out" / "spans"
    if named_as == "an existing directory":
        folder.mkdir(parents=True)
    setting = f"{folder}/" if named_as == "a path ending in /" else str(folder)
    for run in ("first", "second"):  # two processes of one run, given the same environment
        (tmp_path / run).mkdir()
        process, _ = run_instrumented(
            tmp_path / run,
            OTEL_TRACES_EXPORTER="gym_json_file",
            OTEL_METRICS_EXPORTER="gym_json_file",
            OTEL_PYTHON_GYM_JSON_FILE=setting,
            OTEL_PYTHON_GYM_TARGETS=TARGETS,
        )
        assert process.returncode == 0, process.stderr
        assert not process.stderr.strip()
    files = sorted(folder.iterdir())
    assert len(files) == 2 and all(f.suffix == ".jsonl" and f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert [_span_names(f).count(semconv.SPAN_DISPATCH) for f in files] == [4, 4]
    assert build_report([folder])["run"]["dispatches"] == 8


FORKING = """
import os, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from gym_instrument.tools.export import JsonFileSpanExporter

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonFileSpanExporter(sys.argv[1])))
tracer = provider.get_tracer("fork-test")
tracer.start_span("before fork").end()
child = os.fork()
if child == 0:
    tracer.start_span("in the child").end()
    os._exit(0)
os.waitpid(child, 0)
tracer.start_span("after fork").end()
"""


def test_a_forked_child_writes_a_file_of_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "spans"
    script = tmp_path / "forking.py"
    script.write_text(FORKING)
    process = subprocess.run([sys.executable, str(script), f"{folder}/"], capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    by_file = sorted(_span_names(f) for f in folder.iterdir())
    assert by_file == [["before fork", "after fork"], ["in the child"]]


def test_a_folders_file_is_never_one_already_there(tmp_path: Path) -> None:
    """Another user's file or link in a shared folder is never written through: each file is made new."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from gym_instrument.tools.export import JsonFileSpanExporter

    folder = tmp_path / "shared"
    folder.mkdir()
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("kept\n")
    (folder / "planted.jsonl").symlink_to(elsewhere)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonFileSpanExporter(f"{folder}/")))
    provider.get_tracer("test").start_span("one").end()
    provider.shutdown()
    assert elsewhere.read_text() == "kept\n"
    (new,) = [f for f in folder.iterdir() if not f.is_symlink()]
    assert _span_names(new) == ["one"]
