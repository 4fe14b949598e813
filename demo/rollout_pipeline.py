"""A small rollout pipeline in the shape of NeMo Gym's, with no telemetry code at all.

A collector expands tasks into repeats and dispatches each row to an agent; the agent runs an
episode and asks a resources server to verify it; afterwards a health pass judges every rollout.
One dispatch fails on its first attempt and is retried; some rewards are masked or not numeric.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

TASKS = [
    {"task_id": "arith-001", "question": "2 + 2", "expected": "4"},
    {"task_id": "arith-002", "question": "7 * 6", "expected": "42"},
    {"problem_id": "geo-17", "question": "angles in a triangle", "expected": "180"},
    {"question": "capital of France", "expected": "Paris"},  # a dataset row with no task id
]
REPEATS = 3
# The scripted "model": what it answers for (task index, repeat).
ANSWERS = {
    (0, 0): "4", (0, 1): "4", (0, 2): "5",
    (1, 0): "42", (1, 1): "41", (1, 2): "42",
    (2, 0): "180", (2, 1): "180", (2, 2): "90",
    (3, 0): "Paris", (3, 1): None, (3, 2): "Paris",
}  # fmt: skip


class AgentUnavailable(ConnectionError):
    pass


@dataclass
class Finding:
    check: str
    detail: dict = field(default_factory=dict)


@dataclass
class RolloutDigest:
    task_index: int
    rollout_index: int
    rollout_id: str
    verdict: str
    findings: list[Finding] = field(default_factory=list)


@dataclass
class HealthCheckResult:
    rollouts: list[RolloutDigest]


class ResourcesServer:
    async def verify(self, body: dict) -> dict:
        await asyncio.sleep(0.001)
        if body["answer"] is None:
            return {"reward": "n/a", "failure_kind": "no_answer"}  # not numeric: no reward on the span
        if body["question"] == "angles in a triangle" and body["answer"] != body["expected"]:
            return {"reward": 0.0, "mask_sample": True}  # excluded from scores
        return {"reward": 1.0 if body["answer"] == body["expected"] else 0.0}


class Agent:
    def __init__(self, server: ResourcesServer) -> None:
        self.server = server
        self.flaky_once = {(1, 2)}

    async def run(self, row: dict) -> dict:
        key = (row["_ng_task_index"], row["_ng_rollout_index"])
        if key in self.flaky_once and row.get("_ng_attempt_index", 0) == 0:
            self.flaky_once.discard(key)
            raise AgentUnavailable("agent connection reset")
        answer = None if key == (3, 1) else ANSWERS[key]  # (3, 1): the model gave no final answer
        await asyncio.sleep(0.002)
        verdict = await self.server.verify({"question": row["question"], "expected": row["expected"], "answer": answer})
        return {**verdict, "answer": answer, "_ng_task_index": key[0], "_ng_rollout_index": key[1]}


class Collector:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def dispatch(self, row: dict) -> dict:
        return await self.agent.run(row)

    async def run_examples(self, tasks: list[dict], repeats: int) -> list[dict]:
        rows = [
            {**task, "_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": "demo_agent"}}
            for t, task in enumerate(tasks)
            for r in range(repeats)
        ]

        async def with_retry(row: dict) -> dict:
            try:
                return await self.dispatch(row)
            except AgentUnavailable:
                return await self.dispatch({**row, "_ng_attempt_index": 1})

        return list(await asyncio.gather(*(with_retry(row) for row in rows)))


def run_health_checks(rollouts: list[dict]) -> HealthCheckResult:
    digests = []
    for rollout in rollouts:
        findings = []
        if rollout["answer"] is None:
            findings += [Finding("agent_turn_hollow"), Finding("rollout_ended_on_failed_model_call")]
        elif rollout.get("reward") == 0.0 and not rollout.get("mask_sample"):
            findings.append(Finding("model_call_runaway_generation"))
        if rollout.get("mask_sample"):
            findings += [Finding("rollout_token_count_mismatch"), Finding("rollout_token_count_mismatch")]
        t, r = rollout["_ng_task_index"], rollout["_ng_rollout_index"]
        digests.append(RolloutDigest(t, r, f"{t}-{r}", "unhealthy" if findings else "healthy", findings))
    return HealthCheckResult(digests)


async def main(output: Path) -> None:
    collector = Collector(Agent(ResourcesServer()))
    rollouts = await collector.run_examples(TASKS, REPEATS)
    output.write_text("".join(json.dumps(rollout) + "\n" for rollout in rollouts))
    health = await asyncio.to_thread(run_health_checks, rollouts)
    unhealthy = sum(digest.verdict == "unhealthy" for digest in health.rollouts)
    print(f"pipeline: {len(rollouts)} rollouts written to {output.name}, {unhealthy} unhealthy", file=sys.stderr)
