"""``gym-instrument compare``: time and masking per task and overall, each run named by its service and
file, and a link to each run's own report. Run A is the demo run under the launcher; run B the same
spans with the masked verify unmasked (a run where nothing was masked)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo"))

import run_demo

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
MASKED = '"nemo.gym.verify.masked","value":{"boolValue":true}'


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    spans_file, _, _ = run_demo.run_pipeline(tmp_path_factory.mktemp("demo"))
    text = spans_file.read_text()
    assert text.count(MASKED) == 1
    run_b = spans_file.with_name("unmasked.jsonl")
    run_b.write_text(text.replace(MASKED, MASKED.replace("true", "false")))
    return spans_file, run_b


def command(*arguments: str) -> subprocess.CompletedProcess[str]:
    # --max-infra-failures 20%: the demo's 2 of 12 infrastructure failures are not what this test is about.
    return subprocess.run(
        [str(GYM_INSTRUMENT), *arguments, "--max-infra-failures", "20%"], capture_output=True, text=True, check=True
    )


def test_time_and_masking_per_task_and_overall(runs: tuple[Path, Path]) -> None:
    run_a, run_b = runs
    comparison: dict[str, Any] = json.loads(command("compare", str(run_a), str(run_b), "--format", "json").stdout)
    report_a = json.loads(command("report", str(run_a), "--no-html", "--format", "json").stdout)
    overall = comparison["overall"]
    assert overall["masked_rate"] == {"a": 1 / 12, "b": 0.0, "diff": -1 / 12}
    # The same spans' durations: the same quantiles as the run's own report, no change.
    assert overall["p50_ms"] == {"a": report_a["time"]["p50_ms"], "b": report_a["time"]["p50_ms"], "diff": 0.0}
    assert overall["p95_ms"]["a"] == report_a["time"]["p95_ms"] and overall["p95_ms"]["diff"] == 0.0
    tasks = {task["task"]: task["measures"] for task in comparison["tasks"]}
    assert tasks["geo-17"]["masked_rate"] == {"a": 1 / 3, "b": 0.0, "diff": -1 / 3}
    per_task_a = {task["task"]: task for task in report_a["tasks"]}
    for name, measures in tasks.items():
        assert measures["p50_ms"]["a"] == per_task_a[name]["p50_ms"] is not None
        assert measures["p95_ms"]["a"] == per_task_a[name]["p95_ms"] >= per_task_a[name]["p50_ms"]
    assert "tokens_mean" not in {key for key, value in overall.items() if value["a"] is not None}  # the demo has none


def test_each_side_named_by_service_and_file_with_a_link_to_its_report(runs: tuple[Path, Path], tmp_path: Path) -> None:
    run_a, run_b = runs
    out = command("compare", str(run_a), str(run_b), "--html", str(tmp_path / "compare.html")).stdout
    lines = out.splitlines()
    assert f"A: demo-rollouts ({run_a}); its report: {tmp_path / 'compare-a.html'}" in lines
    assert f"B: demo-rollouts ({run_b}); its report: {tmp_path / 'compare-b.html'}" in lines
    assert re.search(r"^masked share\s+8%\s+0%\s+-8 pts$", out, re.MULTILINE)
    assert re.search(r"^dispatch time p95\s+[\d.]+ ms\s+[\d.]+ ms\s+\+0\.000 ms$", out, re.MULTILINE)
    page = (tmp_path / "compare.html").read_text()
    assert f"<b>A</b>: demo-rollouts <code>{run_a}</code> · <a href='compare-a.html'>its report</a>" in page
    assert "time p50 · p95, ms A → B" in page and "masked A → B" in page
    assert "Reward per task" in (tmp_path / "compare-a.html").read_text()
