"""What a person reads in the report of the demo run (under the real launcher): the run's start, end and
wall time, an id-less task named one way, "Reward per task" over rollouts as the Tasks table counts
them, pass@k named one way, plurals."""

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


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("demo")
    spans_file, _, _ = run_demo.run_pipeline(out)
    text = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(spans_file), "--html", str(out / "report.html")], capture_output=True, text=True
    )
    assert text.returncode == 4, text.stderr  # the demo's infrastructure failures: 2 of 12, over 5 %
    as_json = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(spans_file), "--no-html", "--format", "json"], capture_output=True, text=True
    )
    return spans_file, text.stdout, (out / "report.html").read_text(), json.loads(as_json.stdout)


def test_start_end_and_wall_time(demo: Any) -> None:
    _, text, page, figures = demo
    source = figures["source"]
    assert source["wall_ms"] == (source["last_end_unix_nano"] - source["first_start_unix_nano"]) / 1e6 > 0
    assert re.search(
        r"^wall time: [\d.]+ ms \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d to [\d:]{8} UTC\); tokens: none on these spans$",
        text.splitlines()[2],
    )
    assert "<span>wall time</span>" in page or ">wall time<" in page


def test_an_id_less_task_is_named_by_its_index_everywhere(demo: Any, capsys: pytest.CaptureFixture[str]) -> None:
    spans_file, text, page, _ = demo
    rows = run_demo.table(run_demo.spans_of(spans_file))
    assert {row[0] for row in rows if row[2].startswith("3-")} == {"#3"}  # make demo's table
    assert re.search(r"^#3\s+3\s", text, re.MULTILINE)  # the report's task table
    assert re.search(r"^#3\s+3-1\s+failure: no_answer", text, re.MULTILINE)  # its unhealthy rollouts
    assert "(no task id)" not in page and ">#3<" in page


def test_reward_per_task_counts_rollouts_as_the_tasks_table(demo: Any) -> None:
    _, _, page, figures = demo
    arith_002 = next(task for task in figures["tasks"] if task["task"] == "arith-002")
    assert (arith_002["dispatches"], arith_002["rollouts"]) == (4, 3)  # one failed attempt, replaced by its retry
    assert "arith-002: 2 of 3 rollouts success" in page and "arith-002: 1 of 4" not in page
    assert "arith-002: 1 of 3 rollouts below" in page and "arith-002: 1 of 3 rollouts failed" not in page
    # The reward of every rollout: the failed attempt that its retry replaced is not one; the masked and the
    # failure-kind rollouts are one each.
    assert "rollout failed</title>" not in page and "rollouts failed</title>" not in page
    assert "<title>1 rollout masked</title>" in page and "<title>1 rollout failure kind</title>" in page


def test_pass_at_k_named_one_way_and_plurals(demo: Any) -> None:
    _, text, page, _ = demo
    assert "pass@n" not in page and "<th>pass@k</th>" in page
    assert "retries: 1 dispatch; 1 rollout recovered, 0 still failed" in text
    assert "4 tasks; 13 dispatches, 1 retry" in page


def test_the_first_lines_say_what_a_person_decides_on(demo: Any) -> None:
    """Rollouts, succeeded, scored zero, infrastructure failures, masked, unhealthy, wall time, tokens: first, and
    "scored" (a numeric reward, no failure) where "rewarded" used to mean that."""
    _, text, page, figures = demo
    first = "\n".join(text.splitlines()[:3])
    for word in ("rollouts", "succeeded", "scored zero", "infrastructure failures", "masked", "unhealthy", "wall time", "tokens"):
        assert word in first, word
    run = figures["run"]
    assert f"rollouts: {run['rollouts']} " in first and f"{run['successes']} succeeded" in first
    assert run["successes"] + run["scored_zero"] + run["infra_failures"] == run["rollouts"] == 12  # the parts add up
    assert "rewarded" not in text.replace("rewarded_total", "")
    assert "ewarded" not in re.sub(r"<[^>]+>", " ", page)  # the page's words, its markup aside
    for name in ("succeeded", "scored zero", "infrastructure failures", "unhealthy", "wall time", "tokens"):
        assert f">{name}<b>" in page, name  # the cards above the fold
