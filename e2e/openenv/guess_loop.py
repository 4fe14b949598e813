"""A user's own rollout loop over the environment, through OpenEnv's ``EnvClient``: no telemetry code.

``run_episode(task, repeat, url, rewards)`` plays one episode in one WebSocket session (the client's
``async with``), guessing by halving the range from a first guess that depends on the repeat, and
notes each step's reward in ``rewards``;
a task with ``fumble_at`` sends a guess below zero at that step, which the server's environment
refuses by raising. ``judge_episodes(results)`` returns the user's own verdict records.
``verify-on-server.toml`` or ``verify-on-client.toml`` beside it traces it by configuration alone.
"""

from __future__ import annotations

from typing import Any

from guess_env import GuessAction, GuessObservation
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State

TASKS: list[dict[str, Any]] = [
    {"task_id": "three", "target": 3},
    {"task_id": "nine", "target": 9},
    {"task_id": "twelve", "target": 12},
    {"task_id": "six", "target": 6},
    {"task_id": "fumble", "target": 5, "fumble_at": 2},
]
FIRST_GUESS = (8, 2)  # by repeat


class GuessClient(EnvClient[GuessAction, GuessObservation, State]):
    def _step_payload(self, action: GuessAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[GuessObservation]:
        observation = GuessObservation(**payload.get("observation", {}))
        return StepResult(observation=observation, reward=payload.get("reward"), done=bool(payload.get("done")))

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(**payload)


async def run_episode(task: dict[str, Any], repeat: int, url: str, rewards: list[float]) -> dict[str, Any]:
    """One episode: every step's reward as the client saw it, and the last (the episode's reward)."""
    low, high, guess = 0, 15, FIRST_GUESS[repeat]
    async with GuessClient(base_url=url) as env:
        result = await env.reset(target=task["target"])
        while not result.done:
            if task.get("fumble_at") == len(rewards) + 1:
                guess = -1
            result = await env.step(GuessAction(guess=guess))
            rewards.append(float(result.reward))
            if result.observation.hint == "higher":
                low = guess + 1
            elif result.observation.hint == "lower":
                high = guess - 1
            guess = (low + high) // 2
    return {"task_id": task["task_id"], "repeat": repeat, "rewards": rewards, "reward": rewards[-1]}


def judge_episodes(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user's own verdicts: ``ok``/``bad`` and the problems found."""
    verdicts = []
    for result in results:
        problems = []
        if "error" in result:
            problems.append("raised")
        elif result["reward"] < 1.0:
            problems.append("missed")
        elif len(result["rewards"]) > 3:
            problems.append("slow")
        verdicts.append(
            {
                "task_id": result["task_id"],
                "repeat": result["repeat"],
                "verdict": "bad" if problems else "ok",
                "problems": problems,
            }
        )
    return verdicts
