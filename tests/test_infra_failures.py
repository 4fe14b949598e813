"""Infrastructure failures apart from rewards of 0: a real run where a third of the rollouts fail in set-up.

The pipeline (``tests/setup_failures``) runs under ``opentelemetry-instrument`` with the package's
``gym_json_file`` exporter: 12 rollouts, 2 whose dispatch raises while setting up, 2 whose verify
answers reward 0 with a failure kind, 2 honest zeros. What a person sees is read from the real
``gym-instrument`` command: its first line, its exit code, its JSON and its page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.setup_failures.pipeline import TARGETS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SETUP_ERROR = "tests.setup_failures.pipeline.EnvironmentSetupError"


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("setup_failures")
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
        "PYTHONPATH": str(ROOT),
        "OTEL_SERVICE_NAME": "setup-failures",
        "OTEL_TRACES_EXPORTER": "gym_json_file",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_PYTHON_GYM_JSON_FILE": str(out / "spans.jsonl"),
        "OTEL_PYTHON_GYM_TARGETS": TARGETS,
    }
    subprocess.run(
        [str(BIN / "opentelemetry-instrument"), sys.executable, "-m", "tests.setup_failures", str(out / "rollouts.jsonl")],
        env=environment,
        cwd=ROOT,
        check=True,
    )
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and sum(row.get("failure_kind") is not None for row in rows) == 4  # a third failed in set-up
    return out / "spans.jsonl"


def gym_instrument(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "gym-instrument"), *arguments], capture_output=True, text=True)


def test_the_first_line_says_a_third_failed_and_the_exit_code_is_its_own(spans_file: Path, tmp_path: Path) -> None:
    process = gym_instrument("report", str(spans_file), "--html", str(tmp_path / "report.html"))
    assert process.returncode == 4, process.stderr
    assert process.stdout.splitlines()[0] == (
        "OVER THE LIMIT: infrastructure failures: 4 of 12 rollouts (33%, over --max-infra-failures 5%):"
        f" environment_setup_failed 2, {SETUP_ERROR} 2; scored zero (reward 0, no failure): 2"
    )
    assert "infrastructure failures per task (not rewards of 0):" in process.stdout
    assert (tmp_path / "report.html").is_file()  # written all the same
    page = (tmp_path / "report.html").read_text()
    assert "Infrastructure failures" in page and "4 of 12 rollouts" in page


def test_a_limit_above_the_share_exits_0_and_still_counts_them(spans_file: Path) -> None:
    process = gym_instrument("report", str(spans_file), "--no-html", "--max-infra-failures", "40%")
    assert process.returncode == 0, process.stderr
    assert process.stdout.startswith("infrastructure failures: 4 of 12 rollouts (33%, within --max-infra-failures 40%)")
    assert gym_instrument("report", str(spans_file), "--no-html", "--max-infra-failures", "0.3").returncode == 4


def test_per_task_kinds_and_scored_zeros_in_the_json(spans_file: Path) -> None:
    process = gym_instrument("report", str(spans_file), "--no-html", "--format", "json")
    assert process.returncode == 4
    figures: dict[str, Any] = json.loads(process.stdout)
    infra = figures["infra_failures"]
    assert (infra["rollouts"], infra["failures"], infra["scored_zero"], infra["over_limit"]) == (12, 4, 2, True)
    assert infra["kinds"] == {SETUP_ERROR: 2, "environment_setup_failed": 2}
    per_task = {task["task"]: task["infra_failures"] for task in figures["tasks"]}
    assert per_task["env-0"] == {"rollouts": 2, "failures": 1, "share": 0.5, "kinds": {SETUP_ERROR: 1}, "scored_zero": 0}
    assert per_task["env-2"]["kinds"] == {"environment_setup_failed": 1}
    assert per_task["env-4"] == {"rollouts": 2, "failures": 0, "share": 0.0, "kinds": {}, "scored_zero": 1}
    # A rollout is an infrastructure failure or scored, never both: the verifies that said reward 0 with a failure
    # kind are not scored zeros, and their 0 is in no mean.
    run = figures["run"]
    assert (run["rollouts"], run["scored"], run["scored_zero"], run["infra_failures"]) == (12, 8, 2, 4)


def test_compare_says_so_first_and_exits_4_too(spans_file: Path, tmp_path: Path) -> None:
    process = gym_instrument("compare", str(spans_file), str(spans_file), "--html", f"{tmp_path}/pages/")
    assert process.returncode == 4, process.stderr
    assert process.stdout.splitlines()[:2] == [
        f"OVER THE LIMIT: infrastructure failures in {side}: 4 of 12 rollouts (33%, over --max-infra-failures 5%):"
        f" environment_setup_failed 2, {SETUP_ERROR} 2"
        for side in "AB"
    ]
    page = (tmp_path / "pages" / "compare.html").read_text()  # --html DIR/: the page goes in it
    assert "<section id='infra-failures' class='infra over'><p>OVER THE LIMIT: infrastructure failures in A" in page
    assert gym_instrument("compare", str(spans_file), str(spans_file), "--max-infra-failures", "50%").returncode == 0


def test_a_bad_limit_is_one_line_and_exit_2(spans_file: Path) -> None:
    for bad in ("5", "-1%", "half"):
        process = gym_instrument("report", str(spans_file), "--no-html", "--max-infra-failures", bad)
        assert process.returncode == 2 and process.stdout == "", bad
        assert "--max-infra-failures" in process.stderr and "Traceback" not in process.stderr
