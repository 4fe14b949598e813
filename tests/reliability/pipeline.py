"""A rollout pipeline with no telemetry code in it, shaped like NeMo Gym's: a client that POSTs
rows to an agent's ``/run`` and requests to ``/verify``, resources servers that override
``verify``, and a health pass that may fan out to a process pool. The reliability tests wrap it
by import path, exactly as a user would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM

# -- plain callables whose outcome the caller decides: ("return", obj) or ("raise", exception) ---


def settle(outcome: tuple[str, Any]) -> Any:
    kind, value = outcome
    if kind == "raise":
        raise value
    return value


def dispatch(row: Any, outcome: tuple[str, Any]) -> Any:
    return settle(outcome)


async def dispatch_async(row: Any, outcome: tuple[str, Any]) -> Any:
    await asyncio.sleep(0)
    return settle(outcome)


def dispatch_calling(row: Any, inner: Callable[[], Any]) -> Any:
    return inner()


class Client:
    """A generic HTTP-like client: only POSTs to ``/run`` are rollouts."""

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return settle(kwargs["outcome"])


def verify(body: Any, outcome: tuple[str, Any]) -> Any:
    return settle(outcome)


def health_pass(rollout_paths: Any, outcome: tuple[str, Any]) -> Any:
    return settle(outcome)


class Runner:
    @classmethod
    def dispatch_classmethod(cls, row: Any, outcome: tuple[str, Any]) -> Any:
        return settle(outcome)

    @staticmethod
    def dispatch_staticmethod(row: Any, outcome: tuple[str, Any]) -> Any:
        return settle(outcome)

    def dispatch_generator(self, row: Any, outcome: tuple[str, Any]) -> Any:
        yield "step"
        return settle(outcome)

    async def dispatch_async_generator(self, row: Any, outcome: tuple[str, Any]) -> Any:
        yield "step"
        await asyncio.sleep(0)
        yield settle(outcome)

    @contextlib.asynccontextmanager
    async def dispatch_interaction(self, row: Any) -> Any:
        """An async context manager (verifiers' ``Agent.interaction`` shape): the caller's body is the rollout."""
        await asyncio.sleep(0)
        yield "entered"
        await asyncio.sleep(0)


# -- NeMo Gym's shape: ServerClient.post carries /run and /verify; verify lives in subclasses ----


@dataclass
class VerifyRequest:
    """What a resources server's verify receives: the row's _ng_* keys do not reach it."""

    answer: float
    response: str = ""


@dataclass
class VerifyResponse:
    reward: float
    mask_sample: bool = False


@dataclass
class RolloutDigest:
    task_index: Any
    rollout_index: Any
    rollout_id: Any
    verdict: str
    findings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class HealthCheckResult:
    rollouts: list[RolloutDigest]


def expected_reward(task_index: int, rollout_index: int) -> float:
    """Each rollout's reward is unique to it, so a reward on the wrong span is visible."""
    return task_index * 1000.0 + rollout_index


class SimpleResourcesServer:
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        return VerifyResponse(reward=0.0)

    def verify_sync(self, body: VerifyRequest) -> VerifyResponse:
        return VerifyResponse(reward=0.0)


class ScoringServer(SimpleResourcesServer):
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        await asyncio.sleep(0)
        return VerifyResponse(reward=body.answer)

    def verify_sync(self, body: VerifyRequest) -> VerifyResponse:
        time.sleep(0)
        return VerifyResponse(reward=body.answer)


class PlainScoringServer(ScoringServer):
    """Inherits verify and verify_sync, overriding neither."""


class GatedScoringServer(ScoringServer):
    """Holds every verify at a gate (an asyncio.Event, or a threading.Event for verify_sync)."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate
        self.waiting = 0
        self._lock = threading.Lock()

    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        self.waiting += 1
        await self.gate.wait()
        return await super().verify(body)

    def verify_sync(self, body: VerifyRequest) -> VerifyResponse:
        with self._lock:
            self.waiting += 1
        self.gate.wait()
        return super().verify_sync(body)


class ServerClient:
    """Every POST goes through here; only ``/run`` is a rollout."""

    def __init__(self, resources: SimpleResourcesServer, yields: int = 2, gate: asyncio.Event | None = None) -> None:
        self.resources = resources
        self.yields = yields
        self.gate = gate

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> Any:
        body = kwargs.get("json")
        if url_path == "/verify":
            return await self.resources.verify(VerifyRequest(answer=body["answer"], response=body.get("response", "")))
        if url_path != "/run":
            return {"ok": True}
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        await self.post(server_name, "/seed_session", json={})
        answer = expected_reward(body["_ng_task_index"], body["_ng_rollout_index"])
        verdict = await self.post("resources", "/verify", json={"answer": answer, "response": body.get("prompt", "")})
        await asyncio.sleep(0)
        return {
            "reward": verdict.reward,
            "_ng_task_index": body["_ng_task_index"],
            "_ng_rollout_index": body["_ng_rollout_index"],
        }

    def post_sync(self, server_name: str, url_path: str, **kwargs: Any) -> Any:
        body = kwargs.get("json")
        if url_path == "/verify":
            return self.resources.verify_sync(VerifyRequest(answer=body["answer"]))
        time.sleep(0)
        answer = expected_reward(body["_ng_task_index"], body["_ng_rollout_index"])
        verdict = self.post_sync("resources", "/verify", json={"answer": answer})
        time.sleep(0)
        return {
            "reward": verdict.reward,
            "_ng_task_index": body["_ng_task_index"],
            "_ng_rollout_index": body["_ng_rollout_index"],
        }


def digest(output_row: dict[str, Any]) -> RolloutDigest:
    """The per-rollout health work (runs in pool workers); the id is the bare index form."""
    task_index, rollout_index = output_row["_ng_task_index"], output_row["_ng_rollout_index"]
    unhealthy = (task_index + rollout_index) % 3 == 0
    findings = (
        [{"check": "model_call_failed"}, {"check": "agent_turn_hollow"}, {"check": "model_call_failed"}] if unhealthy else []
    )
    return RolloutDigest(
        task_index=task_index,
        rollout_index=rollout_index,
        rollout_id=f"{task_index}-{rollout_index}",
        verdict="unhealthy" if unhealthy else "healthy",
        findings=findings,
    )


def run_health_checks(
    rollout_paths: Sequence[dict[str, Any]], *, workers: int = 1, start_method: str | None = None
) -> HealthCheckResult:
    """Like NeMo Gym's: serial with one worker, else a process pool; digests come back pickled."""
    if workers <= 1:
        return HealthCheckResult(rollouts=[digest(row) for row in rollout_paths])
    import multiprocessing

    context = multiprocessing.get_context(start_method) if start_method else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return HealthCheckResult(rollouts=list(pool.map(digest, rollout_paths, chunksize=16)))


def worker_pid(_: Any = None) -> int:
    return os.getpid()


def targets(module_name: str = __name__) -> list[Any]:
    """The targets that wrap this pipeline, as a user would write them."""
    from gym_instrument import Target

    return [
        Target(f"{module_name}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        Target(f"{module_name}:ServerClient.post_sync", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        Target(f"{module_name}:SimpleResourcesServer.verify", "verify", schema=NEMO_GYM),
        Target(f"{module_name}:SimpleResourcesServer.verify_sync", "verify", schema=NEMO_GYM),
        f"{module_name}:run_health_checks=health@nemo_gym",
        f"{module_name}:dispatch=dispatch@nemo_gym",
        f"{module_name}:dispatch_async=dispatch@nemo_gym",
        f"{module_name}:Runner.dispatch_classmethod=dispatch@nemo_gym",
        f"{module_name}:Runner.dispatch_staticmethod=dispatch@nemo_gym",
        f"{module_name}:Runner.dispatch_generator=dispatch@nemo_gym",
        f"{module_name}:Runner.dispatch_async_generator=dispatch@nemo_gym",
        f"{module_name}:Runner.dispatch_interaction=dispatch@nemo_gym",
        Target(f"{module_name}:Client.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        f"{module_name}:dispatch_calling=dispatch@nemo_gym",
        f"{module_name}:verify=verify@nemo_gym",
        f"{module_name}:health_pass=health@nemo_gym",
    ]


def run_in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``count`` threads released together; results by thread index."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def runner(position: int) -> None:
        barrier.wait()
        try:
            results[position] = work(position)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=runner, args=(position,)) for position in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
