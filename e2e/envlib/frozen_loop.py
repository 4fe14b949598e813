"""A user's own rollout loop over Gymnasium's toy-text environments: no telemetry code at all.

``run_episode(task, repeat)`` plays one episode with the environment library's own ``step`` as
the scorer (a reward on every step), and ``judge_episodes(results)`` returns the user's own
verdict records. ``gym.toml`` beside it traces it by configuration alone.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3  # FrozenLake
C_UP, C_RIGHT, C_DOWN = 0, 1, 2  # CliffWalking

TASKS: list[dict[str, Any]] = [
    {"task_id": "lake-goal", "env": "lake", "actions": [RIGHT, RIGHT, DOWN, DOWN, DOWN, RIGHT]},
    {"task_id": "lake-hole", "env": "lake", "actions": [DOWN, RIGHT]},
    {"task_id": "cliff-safe", "env": "cliff", "actions": [C_UP] + [C_RIGHT] * 11 + [C_DOWN]},
    {"task_id": "cliff-fall", "env": "cliff", "actions": [C_RIGHT, C_UP] + [C_RIGHT] * 11 + [C_DOWN]},
    {"task_id": "lake-bad-action", "env": "lake", "actions": [RIGHT, 7]},  # the library raises on action 7
]


def make_env(name: str) -> Any:
    if name == "lake":
        return FrozenLakeEnv(map_name="4x4", is_slippery=False)
    return CliffWalkingEnv()


def run_episode(task: dict[str, Any], repeat: int) -> dict[str, Any]:
    """One episode: every step's reward, and the total (the loop's own final reward)."""
    env = make_env(task["env"])
    env.reset(seed=repeat)
    rewards: list[float] = []
    done = False
    for action in task["actions"]:
        _, reward, terminated, truncated, _ = env.step(action)
        rewards.append(float(reward))
        done = terminated or truncated
        if done:
            break
    return {"task_id": task["task_id"], "repeat": repeat, "rewards": rewards, "reward": sum(rewards), "done": done}


def judge_episodes(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user's own verdicts: ``ok``/``bad`` and the problems found."""
    verdicts = []
    for result in results:
        problems = []
        if "error" in result:
            problems.append("raised")
        else:
            if not result["done"]:
                problems.append("unfinished")
            if result["reward"] <= -100:
                problems.append("fell_off_cliff")
            if result["task_id"].startswith("lake") and result["reward"] == 0:
                problems.append("fell_in_hole")
        verdicts.append(
            {
                "task_id": result["task_id"],
                "repeat": result["repeat"],
                "verdict": "bad" if problems else "ok",
                "problems": problems,
            }
        )
    return verdicts
