"""``gym-instrument compare RUN_A RUN_B``: run B against run A, per task and overall, worse first.

Run A is the real NeMo Gym 0.7.0 run in ``tests/data/e2e_runs/``; run B is the same spans with
task weather-sf's rewards dropped to 0 and one of task #2's raised to 1, so the expected changes
are known exactly; a replayed run folder of the same run compares equal to its live spans.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
RUN_070 = Path(__file__).resolve().parent / "data" / "e2e_runs" / "nemo-gym-0.7.0"
LIVE = RUN_070 / "live_spans.otlp.jsonl"
NEW_REWARDS = {"3-0": 0.0, "3-1": 0.0, "2-1": 1.0}  # weather-sf is task 3 (both were 1); #2 is task 2 (2-1 was 0)


def gym_instrument(*arguments: str) -> subprocess.CompletedProcess[str]:
    process = subprocess.run([str(GYM_INSTRUMENT), *arguments], capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    return process


def with_new_rewards(line: str) -> str:
    batch = json.loads(line)
    for resource in batch.get("resourceSpans", []):
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                values = {item["key"]: item["value"] for item in span.get("attributes", [])}
                rollout_id = values.get("nemo.gym.rollout.id", {}).get("stringValue")
                if span["name"] == "gym.verify" and rollout_id in NEW_REWARDS:
                    values["nemo.gym.rollout.reward"] = {"doubleValue": NEW_REWARDS[rollout_id]}
                    span["attributes"] = [{"key": key, "value": value} for key, value in values.items()]
    return json.dumps(batch, separators=(",", ":")) + "\n"


@pytest.fixture(scope="module")
def run_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run-b") / "spans.jsonl"
    path.write_text("".join(with_new_rewards(line) for line in LIVE.open()))
    return path


def test_worse_tasks_come_first_in_json(run_b: Path) -> None:
    comparison: dict[str, Any] = json.loads(gym_instrument("compare", str(LIVE), str(run_b), "--format", "json").stdout)
    tasks = comparison["tasks"]
    assert [task["change"] for task in tasks] == ["worse"] + ["same"] * 5 + ["better"]
    worse, better = tasks[0], tasks[-1]
    assert worse["task"] == "weather-sf" and better["task"] == "#2"
    assert worse["measures"]["mean_reward"] == {"a": 1.0, "b": 0.0, "diff": -1.0}
    assert worse["measures"]["success_rate"] == {"a": 1.0, "b": 0.0, "diff": -1.0}
    assert worse["measures"]["pass_at_k"] == {"a": 1.0, "b": 0.0, "diff": -1.0, "k": 2}
    assert worse["measures"]["unhealthy_rate"] == {"a": 1.0, "b": 1.0, "diff": 0.0}
    assert worse["measures"]["failed"] == {"a": 0, "b": 0, "diff": 0}
    assert better["measures"]["mean_reward"] == {"a": 0.5, "b": 1.0, "diff": 0.5}
    overall = comparison["overall"]
    assert overall["mean_reward"]["a"] == pytest.approx(9 / 14) and overall["mean_reward"]["b"] == pytest.approx(8 / 14)
    assert overall["mean_reward"]["diff"] == pytest.approx(-1 / 14)
    assert overall["pass_at_1"]["diff"] == pytest.approx((-1 + 0.5) / 7)
    assert overall["pass_at_2"] == {"a": 1.0, "b": pytest.approx(6 / 7), "diff": pytest.approx(-1 / 7)}
    assert overall["succeeded_unhealthy"] == {"a": 4, "b": 3, "diff": -1}  # 3-0, 3-1 no longer succeed; 2-1 now does
    assert overall["unhealthy_rate"]["diff"] == 0.0 and overall["failed"]["diff"] == 0
    assert comparison["overall_change"] == "worse"
    assert comparison["changes"] == {"worse": 1, "new": 0, "same": 5, "better": 1}
    assert comparison["only_in_a"] == comparison["only_in_b"] == []


def test_the_terminal_and_the_page(run_b: Path, tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    out = gym_instrument("compare", str(LIVE), str(run_b), "--html", str(page)).stdout
    assert "B against A: worse overall; per task: 1 worse, 5 the same, 1 better, 0 new (of 7 tasks in both" in out
    assert re.search(r"^mean reward \(over scored\)\s+0\.64\s+0\.57\s+-0\.07$", out, re.MULTILINE)
    rows = out[out.index("tasks, worse first:") :].splitlines()[3:]
    assert rows[0].split()[:2] == ["weather-sf", "worse"] and rows[-3].split()[:2] == ["#2", "better"]
    assert f"comparison: {page}" in out
    html = page.read_text()
    assert "Tasks, worse first" in html and html.index("weather-sf") < html.index(">#2<")


def test_a_replayed_run_folder_compares_equal_to_its_live_spans(tmp_path: Path) -> None:
    folder = tmp_path / "replayed"
    folder.mkdir()
    for name in ("rollouts.jsonl", "rollouts_failures.jsonl", "rollouts_materialized_inputs.jsonl", "rollout_verdicts.jsonl"):
        shutil.copy2(RUN_070 / name, folder / name)
    gym_instrument("replay", str(folder), "--output", str(folder / "spans.otlp.jsonl"))
    comparison = json.loads(gym_instrument("compare", str(LIVE), str(folder), "--format", "json").stdout)
    assert comparison["changes"] == {"worse": 0, "new": 0, "same": 7, "better": 0} and comparison["only_in_b"] == []
    for name in ("mean_reward", "success_rate", "pass_at_1", "unhealthy_rate", "succeeded_unhealthy", "failed", "infra_rate"):
        assert comparison["overall"][name]["diff"] == 0, name


def without_rewards(line: str, rollout_ids: set[str] | None) -> str:
    """The same batch with the reward attribute taken off the verifies of ``rollout_ids`` (None: all of them)."""
    batch = json.loads(line)
    for resource in batch.get("resourceSpans", []):
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                values = {item["key"]: item["value"] for item in span.get("attributes", [])}
                rollout_id = values.get("nemo.gym.rollout.id", {}).get("stringValue")
                if span["name"] == "gym.verify" and (rollout_ids is None or rollout_id in rollout_ids):
                    values.pop("nemo.gym.rollout.reward", None)
                    span["attributes"] = [{"key": key, "value": value} for key, value in values.items()]
    return json.dumps(batch, separators=(",", ":")) + "\n"


def test_a_task_scored_only_in_b_is_new_and_runs_whose_success_differs_are_never_the_same(tmp_path: Path) -> None:
    unscored_task, unscored_run = tmp_path / "no-weather-score.jsonl", tmp_path / "no-score.jsonl"
    unscored_task.write_text("".join(without_rewards(line, {"3-0", "3-1"}) for line in LIVE.open()))
    unscored_run.write_text("".join(without_rewards(line, None) for line in LIVE.open()))

    comparison = json.loads(gym_instrument("compare", str(unscored_task), str(LIVE), "--format", "json").stdout)
    weather = next(task for task in comparison["tasks"] if task["task"] == "weather-sf")
    assert weather["change"] == "new" and weather["measures"]["mean_reward"] == {"a": None, "b": 1.0, "diff": None}
    assert comparison["changes"] == {"worse": 0, "new": 1, "same": 6, "better": 0}
    assert comparison["tasks"][0]["task"] == "weather-sf"  # first: nothing got worse
    back = json.loads(gym_instrument("compare", str(LIVE), str(unscored_task), "--format", "json").stdout)
    assert next(task for task in back["tasks"] if task["task"] == "weather-sf")["change"] == "worse"

    # Run A scored nothing, run B scored 14 rollouts (9 succeeded): not "the same".
    comparison = json.loads(gym_instrument("compare", str(unscored_run), str(LIVE), "--format", "json").stdout)
    assert comparison["overall"]["scored"] == {"a": 0, "b": 14, "diff": 14}
    assert comparison["overall_change"] == "new" and comparison["changes"]["same"] == 0
    text = gym_instrument("compare", str(unscored_run), str(LIVE)).stdout
    assert "B against A: new overall; per task: 0 worse, 0 the same, 0 better, 7 new" in text
