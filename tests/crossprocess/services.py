"""Three processes of a rollout pipeline, talking HTTP on 127.0.0.1, with no telemetry code.

- collector: POSTs each row to the agent's /run through ``ServerClient.post`` (aiohttp client);
- agent (FastAPI): runs the episode and POSTs /verify to the resources server with a body that
  carries no rollout id, as NeMo Gym's request models drop the row's ``_ng_*`` keys;
- resources server (FastAPI): ``verify`` scores the answer.

Every request goes through one function, :func:`request` (as NeMo Gym's through
``nemo_gym.server_utils.request``); the resources server answers with the number of
``traceparent`` headers its ``/verify`` request carried, which the agent passes on.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
from fastapi import FastAPI, Request
from pydantic import BaseModel


async def request(session: aiohttp.ClientSession, method: str, url: str, **kwargs: object) -> dict:
    async with session.request(method, url, **kwargs) as response:  # type: ignore[arg-type]
        response.raise_for_status()
        return {
            **await response.json(),
            **({"traceparents": int(response.headers["x-traceparents"])} if "x-traceparents" in response.headers else {}),
        }


class ServerClient:
    def __init__(self, session: aiohttp.ClientSession, addresses: dict[str, str]) -> None:
        self.session = session
        self.addresses = addresses

    async def post(self, server_name: str, url_path: str, **kwargs: object) -> dict:
        return await request(self.session, "POST", self.addresses[server_name] + url_path, **kwargs)


class VerifyRequest(BaseModel):
    answer: str
    expected: str


class ResourcesServer:
    async def verify(self, body: VerifyRequest) -> dict:
        return {"reward": 1.0 if body.answer == body.expected else 0.0}


def resources_app() -> FastAPI:
    app = FastAPI()
    app.post("/verify")(ResourcesServer().verify)

    @app.middleware("http")
    async def count_traceparents(http_request: Request, call_next: Any) -> Any:
        response = await call_next(http_request)
        response.headers["x-traceparents"] = str(len(http_request.headers.getlist("traceparent")))
        return response

    return app


def agent_app() -> FastAPI:
    app = FastAPI()
    resources = os.environ["RESOURCES_URL"]

    @app.post("/run")
    async def run(row: dict) -> dict:
        answer = "B" if row["_ng_rollout_index"] == 0 else "C"
        async with aiohttp.ClientSession() as session:
            verdict = await request(session, "POST", resources + "/verify", json={"answer": answer, "expected": row["expected"]})
        return {**verdict, "_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"]}

    return app


async def collect(agent_url: str, tasks: int, repeats: int) -> list[dict]:
    rows = [
        {**({"task_id": f"task-{t}"} if t % 2 == 0 else {}), "expected": "B", "_ng_task_index": t, "_ng_rollout_index": r}
        for t in range(tasks)
        for r in range(repeats)
    ]
    async with aiohttp.ClientSession() as session:
        client = ServerClient(session, {"agent": agent_url})
        return list(await asyncio.gather(*(client.post("agent", "/run", json=row) for row in rows)))
