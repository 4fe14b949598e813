"""The loop: every rollout generated first, then each reward function over the whole batch (as a
GRPO trainer does), then the verdicts; writes what it saw to the file named by its first argument,
which the e2e compares the spans with. No telemetry code."""

from __future__ import annotations

import json
import sys

from rewards import accuracy_reward, format_reward
from score_loop import REPEATS, generate, judge, load_tasks

# Built here, where the reward functions are imported (wrapped by then), not in rewards.py itself:
# a list built while rewards.py runs would hold them as they were before they were wrapped.
REWARD_FUNCS = [accuracy_reward, format_reward]


def main() -> None:
    tasks = load_tasks()
    rollouts = [generate(task, repeat) for task in tasks for repeat in range(REPEATS)]
    entries = {task["task_id"]: task["entry"] for task in tasks}
    columns = {
        "task_id": [rollout["task_id"] for rollout in rollouts],
        "repeat": [rollout["repeat"] for rollout in rollouts],
        "entry": [entries[rollout["task_id"]] for rollout in rollouts],
    }
    prompts, completions = [r["prompt"] for r in rollouts], [r["completion"] for r in rollouts]
    scores = {function.__name__: function(prompts, completions, **columns) for function in REWARD_FUNCS}
    for position, rollout in enumerate(rollouts):
        rollout["rewards"] = {name: values[position] for name, values in scores.items()}
        rollout["reward"] = sum(rollout["rewards"].values())  # the loop's own reward: the functions' sum
    verdicts = judge(rollouts)
    with open(sys.argv[1], "w") as out:
        json.dump({"rollouts": [{k: v for k, v in r.items() if k != "prompt"} for r in rollouts], "verdicts": verdicts}, out)


if __name__ == "__main__":
    main()
