"""A trainer and the rollout server it asks for each step's rollouts, two processes on 127.0.0.1, no telemetry code
but the trainer's baggage.

- the rollout server (FastAPI): ``POST /rollouts`` runs :func:`run_rollout` on each row it is sent;
- the trainer (``python -m tests.crossprocess.trainer URL STEPS ROWS``): for each step, sets the W3C
  baggage entries ``nemo.gym.train.step`` and ``nemo.gym.policy.version`` and posts the step's rows
  through :func:`tests.crossprocess.services.request`; then posts one batch outside every step. Each
  row's task id names the step it was sent in (``s{step}-t{row}``; ``warmup-t{row}`` for the last batch),
  so a test can check which step each dispatch span says.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp
from fastapi import FastAPI
from opentelemetry import baggage, context

from tests.crossprocess.services import request


async def run_rollout(row: dict) -> dict:
    """One rollout (the dispatch target)."""
    return {"task_id": row["task_id"], "reward": 1.0}


def rollout_app() -> FastAPI:
    app = FastAPI()

    @app.post("/rollouts")
    async def rollouts(body: dict) -> dict:
        return {"results": [await run_rollout(row) for row in body["rows"]]}

    return app


async def train(url: str, steps: int, rows: int) -> list[dict]:
    results = []
    async with aiohttp.ClientSession() as session:
        for step in range(steps):
            entries = baggage.set_baggage("nemo.gym.train.step", str(step))
            token = context.attach(baggage.set_baggage("nemo.gym.policy.version", f"ckpt-{step}", entries))
            try:
                batch = [{"task_id": f"s{step}-t{row}"} for row in range(rows)]
                results.append(await request(session, "POST", url + "/rollouts", json={"rows": batch}))
            finally:
                context.detach(token)
        batch = [{"task_id": f"warmup-t{row}"} for row in range(rows)]
        results.append(await request(session, "POST", url + "/rollouts", json={"rows": batch}))
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(train(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
