"""The verifiers taskset of `make e2e`: a few multiple-choice tasks read from tasks.jsonl beside it.

Each row has a prompt, an expected letter and (optionally) a string `id` and a `name`; the task
scores 1.0 when the model's reply names the expected letter, else 0.0. The scripted model server
(`gym_harness/model_server.py`) answers right on the first request for a prompt and wrong on the second,
and fails the first request of a prompt that asks for it (`--fail-prompt`), so a run has both
rewards and one failed episode.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import verifiers.v1 as vf

TASKS = Path(__file__).with_name("tasks.jsonl")


class McqaData(vf.TaskData):
    expected_answer: str = ""


class McqaTask(vf.Task[McqaData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        found = re.findall(r"\\boxed\{([A-Z])\}", trace.last_reply)
        return 1.0 if found and found[-1] == self.data.expected_answer else 0.0


class McqaConfig(vf.TasksetConfig):
    pass


class McqaTaskset(vf.Taskset[McqaTask, McqaConfig]):
    def load(self) -> list[McqaTask]:
        tasks = []
        for line in TASKS.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            fields = {key: row[key] for key in ("id", "name") if key in row}
            data = McqaData(prompt=row["prompt"], expected_answer=row["expected_answer"], **fields)
            tasks.append(McqaTask(data, self.config.task))
        return tasks


__all__ = ["McqaTaskset"]
