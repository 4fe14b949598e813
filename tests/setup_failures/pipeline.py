"""A rollout pipeline in NeMo Gym's shape where a third of the rollouts fail in environment set-up.

6 tasks x 2 repeats: 2 dispatches raise while setting up their environment (no retry), 2 verifies
answer reward 0 with ``failure_kind`` (the set-up failed; NeMo Gym scores such a row 0), 2 rollouts
score an honest 0 and the other 6 score 1. No telemetry code: run it under ``opentelemetry-instrument``
with ``OTEL_PYTHON_GYM_TARGETS`` naming ``Collector.dispatch`` and ``ResourcesServer.verify``.

    python -m tests.setup_failures OUT_ROLLOUTS.jsonl   (imports this module, so the launcher's hooks reach it)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

TASKS = [{"task_id": f"env-{index}"} for index in range(6)]
REPEATS = 2
SETUP_RAISES = {(0, 0), (1, 0)}
SETUP_FAILS_IN_VERIFY = {(2, 1), (3, 1)}
HONEST_ZEROS = {(4, 0), (5, 1)}
TARGETS = (
    "tests.setup_failures.pipeline:Collector.dispatch=dispatch@nemo_gym,"
    "tests.setup_failures.pipeline:ResourcesServer.verify=verify@nemo_gym"
)


class EnvironmentSetupError(RuntimeError):
    pass


class ResourcesServer:
    async def verify(self, body: dict) -> dict:
        await asyncio.sleep(0)
        key = (body["_ng_task_index"], body["_ng_rollout_index"])
        if key in SETUP_FAILS_IN_VERIFY:
            return {"reward": 0.0, "failure_kind": "environment_setup_failed"}
        return {"reward": 0.0 if key in HONEST_ZEROS else 1.0}


class Collector:
    def __init__(self) -> None:
        self.server = ResourcesServer()

    async def dispatch(self, row: dict) -> dict:
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        if key in SETUP_RAISES:
            raise EnvironmentSetupError("sandbox did not start")
        return {**row, **await self.server.verify(row)}

    async def run(self) -> list[dict]:
        rows = [
            {**task, "_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": "env_agent"}}
            for t, task in enumerate(TASKS)
            for r in range(REPEATS)
        ]
        results = await asyncio.gather(*(self.dispatch(row) for row in rows), return_exceptions=True)
        return [
            result if isinstance(result, dict) else {**row, "reward": 0.0, "failure_kind": "dispatch_failed"}
            for row, result in zip(rows, results, strict=True)
        ]


def main(output: Path) -> None:
    rollouts = asyncio.run(Collector().run())
    output.write_text("".join(json.dumps(row) + "\n" for row in rollouts))
