"""A user's own generate-then-score loop over reasoning-gym's datasets: no telemetry code at all.

``generate(task, repeat)`` is the rollout: a scripted "model" (no GPU) answers a task's question
right and in the answer format, right but unformatted, or wrong, in turn from rollout to rollout
(each task starts at another place in that turn, so tasks get different rewards).
Every rollout is generated first; the reward functions (``rewards.py``) then score the whole batch,
and ``judge(rollouts)`` returns the user's own verdict records, by task id and repeat.
``gym.toml`` beside it traces it by configuration alone.
"""

from __future__ import annotations

from typing import Any

import reasoning_gym

DATASETS = {"basic_arithmetic": 3, "chain_sum": 2}  # dataset -> tasks taken from it
REPEATS = 2


def load_tasks() -> list[dict[str, Any]]:
    tasks = []
    for name, size in DATASETS.items():
        for index, entry in enumerate(reasoning_gym.create_dataset(name, size=size, seed=7)):
            position = len(tasks)
            tasks.append({"task_id": f"{name}/{index}", "position": position, "question": entry["question"], "entry": entry})
    return tasks


def generate(task: dict[str, Any], repeat: int) -> dict[str, Any]:
    """One rollout of a task: the scripted model's completion."""
    answer = task["entry"]["answer"]
    completion = {0: f"<answer>{answer}</answer>", 1: answer, 2: "<answer>0</answer>"}[(task["position"] + repeat) % 3]
    return {"task_id": task["task_id"], "repeat": repeat, "prompt": task["question"], "completion": completion}


def judge(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user's own verdicts: a record per rollout, by task id and repeat."""
    records = []
    for rollout in rollouts:
        checks = []
        if "<answer>" not in rollout["completion"]:
            checks.append("no_answer_tag")
        if rollout["reward"] == 0:
            checks.append("no_reward")
        records.append({"task_id": rollout["task_id"], "repeat": rollout["repeat"], "verdict": not checks, "checks": checks})
    return records
