"""Runs the loop (5 tasks x 2 repeats, four sessions at a time) against the server at the URL of its
first argument, judges it, and writes what it saw to the file named by its second. No telemetry code."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from guess_loop import TASKS, judge_episodes, run_episode

SESSIONS_AT_ONCE = 4


async def play_all(url: str) -> list[dict[str, Any]]:
    sessions = asyncio.Semaphore(SESSIONS_AT_ONCE)

    async def play(task: dict[str, Any], repeat: int) -> dict[str, Any]:
        rewards: list[float] = []
        async with sessions:
            try:
                return await run_episode(task, repeat, url, rewards)
            except Exception as error:  # the loop goes on; the health pass judges the episode too
                return {"task_id": task["task_id"], "repeat": repeat, "rewards": rewards, "error": type(error).__name__}

    return await asyncio.gather(*(play(task, repeat) for task in TASKS for repeat in range(2)))


def main() -> None:
    results = asyncio.run(play_all(sys.argv[1]))
    verdicts = judge_episodes(results)
    with open(sys.argv[2], "w") as out:
        json.dump({"results": results, "verdicts": verdicts}, out)


if __name__ == "__main__":
    main()
