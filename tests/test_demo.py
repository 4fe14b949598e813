"""``make demo`` shows, per rollout, what the exported spans say, keeps what it made, and prints how to redo it;
it runs in a venv of its own (``.venv-demo``) that holds none of the test toolchain."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo"))

import run_demo


def test_demo_table_matches_the_rollouts_file(tmp_path: Path) -> None:
    spans_file, rollouts_file, _ = run_demo.run_pipeline(tmp_path)
    rollouts = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in map(json.loads, rollouts_file.read_text().splitlines())}
    spans = run_demo.spans_of(spans_file)
    rows = run_demo.table(spans)
    assert len(rows) == 13  # 12 rollouts + the failed first attempt of one
    by_rollout_id = {row[2]: row for row in rows}
    assert by_rollout_id["1-2"][3] == "error: AgentUnavailable" and by_rollout_id["1-2"][4] == "-"
    assert by_rollout_id["1-2-a1"][4] == "healthy"
    for (task_index, repeat), rollout in rollouts.items():
        row = by_rollout_id[f"{task_index}-{repeat}" + ("-a1" if (task_index, repeat) == (1, 2) else "")]
        reward = rollout["reward"]
        if isinstance(reward, float) and not rollout.get("mask_sample"):
            assert row[3] == f"{reward:.1f}"
        else:
            assert row[3].startswith("(")
        assert row[4] in ("healthy", "unhealthy")
    dispatch_by_trace = {span.trace_id[:12] + "…": span for span in spans if span.name == "gym.rollout.dispatch"}
    for row in rows:  # the duration shown is the exported dispatch span's own (whatever the clock says)
        dispatch = dispatch_by_trace[row[7]]
        assert row[6] == f"{(dispatch.end_ns - dispatch.start_ns) / 1e6:.1f} ms"
    assert sum(point["value"] for point in run_demo.metric_points(spans_file, "gym.rollout.rewarded_total")) == 10


def test_demo_keeps_its_spans_as_the_file_exporter_wrote_them(tmp_path: Path) -> None:
    spans_file, _, command = run_demo.run_pipeline(tmp_path)
    assert "OTEL_TRACES_EXPORTER=gym_json_file" in command and ">" not in command  # the quick start's exporter
    batches = [json.loads(line) for line in spans_file.read_text().splitlines()]
    span_batches = [batch for batch in batches if "resourceSpans" in batch]
    assert span_batches and any("resourceMetrics" in batch for batch in batches)
    scopes = {
        scope["scope"]["name"]
        for batch in span_batches
        for resource in batch["resourceSpans"]
        for scope in resource["scopeSpans"]
    }
    assert scopes == {"gym_instrument"}


def test_demo_prints_the_table_a_task_summary_and_a_command_that_reproduces_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "kept"
    run_demo.main(output)
    printed = capsys.readouterr().out
    assert re.search(
        r"^task id\s+repeat\s+rollout id\s+reward\s+verdict\s+failed checks\s+duration\s+trace id$", printed, re.MULTILINE
    )
    # Per task: rollouts, infrastructure failures, scored, succeeded, mean, std, success, pass@k, all equal.
    assert re.search(r"^arith-002\s+3\s+0\s+3\s+2\s+0\.67\s+0\.47\s+67%\s+1\.00 \(k=3\)", printed, re.MULTILINE)
    assert re.search(r"^geo-17\s+3\s+1\s+2\s+2\s+1\.00\s+0\.00\s+100%\s+1\.00 \(k=2\)\s+yes", printed, re.MULTILINE)
    assert sorted(path.name for path in output.iterdir()) == ["report.html", "rollouts.jsonl", "spans.otlp.jsonl"]
    assert "Reward per task" in (output / "report.html").read_text()

    lines = printed.splitlines()
    command = lines[lines.index("the traced run, by hand (from the repository root):") + 1].strip()
    report_command = lines[lines.index("and its report:") + 1].strip()
    (output / "spans.otlp.jsonl").unlink()
    (output / "report.html").unlink()
    # Run as printed, in a shell, from the repository root.
    subprocess.run(["/bin/sh", "-c", command], cwd=run_demo.REPO, check=True, capture_output=True)
    assert len(run_demo.table(run_demo.spans_of(output / "spans.otlp.jsonl"))) == 13
    reported = subprocess.run(["/bin/sh", "-c", report_command], cwd=run_demo.REPO, capture_output=True, text=True)
    # Its masked and no-answer rollouts: 2 of 12 infrastructure failures, over the default limit (exit code 4).
    assert reported.returncode == 4 and reported.stdout.startswith("OVER THE LIMIT: infrastructure failures: 2 of 12")
    assert "rollouts: 12 (4 tasks; 13 dispatches, 1 a failed attempt that a retry replaced)" in reported.stdout
    assert (output / "report.html").is_file()


def _distribution(requirement: str) -> str:
    """A requirement's distribution name, normalised as pip lists it (``opentelemetry-sdk>=1.30`` -> ``opentelemetry-sdk``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def test_make_demo_runs_in_a_venv_without_the_test_toolchain(tmp_path: Path) -> None:
    """``make demo`` builds .venv-demo (a no-op when it is up to date) and runs the demo with its python: the
    venv holds the package, the SDK and the report page's libraries, none of what only the tests need."""
    repo = run_demo.REPO
    subprocess.run(["make", "-s", "--no-print-directory", "demo-venv"], cwd=repo, check=True, capture_output=True)
    # The command the target runs, as make would run it (its venv is up to date now, so only that one).
    (command,) = subprocess.run(
        ["make", "-s", "-n", "--no-print-directory", "demo"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    python = shlex.split(command)[0]
    assert python == ".venv-demo/bin/python"
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], cwd=repo, check=True, capture_output=True, text=True
    )
    installed = {_distribution(entry["name"]) for entry in json.loads(listed.stdout)}

    # The package's extras as this (the test) venv installed them from pyproject.toml.
    extras: dict[str, list[str]] = {"report": [], "test": []}
    for requirement in metadata.requires("gym-instrument") or []:
        extra = re.search(r"""extra\s*==\s*["'](\w+)["']""", requirement)
        if extra and extra.group(1) in extras:
            extras[extra.group(1)].append(requirement)
    demo_requirements = [
        line
        for line in (repo / "demo" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    needed = {_distribution(r) for r in [*extras["report"], *demo_requirements]}
    only_for_tests = {_distribution(r) for r in extras["test"]} - needed - {"gym-instrument"}
    assert {"pytest", "mypy", "ruff", "hypothesis", "fastapi"} <= only_for_tests
    assert installed.isdisjoint(only_for_tests), sorted(installed & only_for_tests)
    assert {"gym-instrument", "opentelemetry-sdk", "opentelemetry-distro"} <= installed

    # make demo, end to end, into a folder of its own rather than demo/output/.
    output = tmp_path / "made"
    process = subprocess.run([*shlex.split(command), str(output)], cwd=repo, check=True, capture_output=True, text=True)
    assert "spans exported: {'gym.rollout.dispatch': 13, 'gym.verify': 12, 'gym.rollout.health': 12}" in process.stdout
    assert " .venv-demo/bin/opentelemetry-instrument .venv-demo/bin/python demo/run_pipeline.py " in process.stdout
    assert sorted(path.name for path in output.iterdir()) == ["report.html", "rollouts.jsonl", "spans.otlp.jsonl"]


def test_demo_ui_keeps_its_files_apart_from_make_demos() -> None:
    # The real command, with no Phoenix about: it names where its Phoenix and files would be.
    process = subprocess.run(
        [sys.executable, "demo/run_demo_ui.py", "--stop"], cwd=run_demo.REPO, capture_output=True, text=True, check=True
    )
    assert process.stdout.strip() == "no detached Phoenix to stop (demo/output/ui/phoenix/phoenix.pid)"
