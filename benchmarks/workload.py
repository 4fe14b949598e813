"""A small rollout pipeline shaped like NeMo Gym's, twice: plain, and traced by hand inline.

The plain functions are what the benchmarks instrument with :class:`gym_instrument.Target`
objects (``workload:ServerClient.post`` with ``url_path == "/run"``, ``workload:send_row``,
``workload:SimpleResourcesServer.verify`` reaching the subclass override,
``workload:run_health_checks``). The ``Lean*``/``lean_*`` and ``Idiomatic*``/``idiomatic_*``
twins and ``hand_health_spans`` are the baselines: the same spans, attributes and W3C baggage
written inline the way a careful engineer would, with the OpenTelemetry API only. Bodies are
deliberately trivial so that a ratio compares the tracing, not the work. The health types are
pydantic models shaped like NeMo Gym's ``rollout_health`` ones.

Rows are NeMo Gym's flat rows: an input line of ``tests/data/mcqa_inputs.jsonl`` plus
``task_id``, ``_ng_task_index``, ``_ng_rollout_index`` and ``agent_ref``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from opentelemetry import baggage, context, metrics, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode
from pydantic import BaseModel, Field

from gym_instrument import semconv

MCQA_INPUTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "mcqa_inputs.jsonl"
AGENT_NAME = "mcqa_simple_agent"


# ---------------------------------------------------------------------------------------------
# Rows


def input_lines() -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in MCQA_INPUTS.read_text().splitlines() if line.strip()]
    for line in lines:  # the collector's keys are added per row below
        for key in [key for key in line if key.startswith("_ng_")]:
            del line[key]
    return lines


def make_rows(count: int, repeats: int = 4, first_task: int = 0) -> list[dict[str, Any]]:
    """``count`` distinct rows: tasks from ``first_task`` on, ``repeats`` rollouts of each."""
    lines = input_lines()
    rows = []
    for number in range(count):
        task_index, rollout_index = first_task + number // repeats, number % repeats
        line = lines[task_index % len(lines)]
        rows.append(
            {
                **line,
                "task_id": f"mcqa/{line['uuid']}",
                "agent_ref": {"name": AGENT_NAME},
                "_ng_task_index": task_index,
                "_ng_rollout_index": rollout_index,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# The plain pipeline (the benchmarks instrument it with Target objects)


class Response:
    """What ``ServerClient.post`` returns (an ``aiohttp.ClientResponse`` in NeMo Gym)."""

    __slots__ = ("body", "status")

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body


Route = Callable[[Any], Awaitable[Any]]


class ServerClient:
    """NeMo Gym's generic client: every internal POST, the rollout dispatch (``/run``) among them."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> Response:
        return Response(200, await self.routes[url_path](kwargs.get("json")))


class PlainServerClient:
    """``ServerClient`` as it was before instrumenting: the same function object, never patched."""

    __init__ = ServerClient.__init__
    post = ServerClient.__dict__["post"]


def send_row(row: dict[str, Any]) -> dict[str, Any]:
    """A synchronous rollout loop's dispatch of one row."""
    return {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"], "reward": 1.0}


# What a rollout's result carries when NeMo Gym sums its model calls' usage into it.
ROLLOUT_USAGE = {"input_tokens": 1_200, "output_tokens": 350, "total_tokens": 1_550}
ROLLOUT_MODEL_CALLS = [{"turn": 0}, {"turn": 1}, {"turn": 2}]


def send_row_with_totals(row: dict[str, Any]) -> dict[str, Any]:
    """``send_row`` whose result carries the rollout's token totals, as a flat row's result does."""
    return {
        "_ng_task_index": row["_ng_task_index"],
        "_ng_rollout_index": row["_ng_rollout_index"],
        "reward": 1.0,
        "response": {"usage": ROLLOUT_USAGE},
        "ng_trajectory": {"model_calls": ROLLOUT_MODEL_CALLS},
    }


async def echo_run(row: Any) -> Any:
    """An agent ``/run`` that answers at once (the micro benchmarks time the tracing, not the agent)."""
    return {"reward": 1.0}


async def no_content(body: Any) -> Any:
    return None


class VerifyRequest(BaseModel):
    """The flat-row path's verify request: no ``_ng_*`` keys reach it (the rollout id comes from baggage)."""

    expected_answer: str
    response_text: str


class VerifyResponse(BaseModel):
    reward: float
    mask_sample: bool = False


class SimpleResourcesServer:
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        raise NotImplementedError


def score(body: VerifyRequest) -> float:
    answer = body.response_text.rpartition("\\boxed{")[2][:1]
    return 1.0 if answer == body.expected_answer else 0.0


class McqaResourcesServer(SimpleResourcesServer):
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        await asyncio.sleep(0)
        return VerifyResponse(reward=score(body))


def agent_run(resources_server: Any) -> Route:
    """An agent's ``/run``: one (instant) model call, then ``/verify`` on the resources server."""

    async def run(row: Any) -> Any:
        await asyncio.sleep(0)  # the model call
        answer = row["expected_answer"] if row["_ng_rollout_index"] % 2 == 0 else "Z"
        request = VerifyRequest(expected_answer=row["expected_answer"], response_text=f"\\boxed{{{answer}}}")
        verified = await resources_server.verify(request)
        return {"reward": verified.reward}

    return run


async def collect(client: Any, rows: Iterable[dict[str, Any]]) -> list[Response]:
    """The collector: every row dispatched at once on one event loop."""
    return await asyncio.gather(*(client.post("simple_agent", "/run", json=row) for row in rows))


class Finding(BaseModel):
    """NeMo Gym's ``rollout_health.Finding``: evidence from one check."""

    check: str
    subject: dict[str, int | str]
    locator: dict[str, int | str] | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class RolloutDigest(BaseModel):
    """NeMo Gym's ``rollout_health.RolloutDigest``: one rollout's verdict."""

    task_index: int | str
    rollout_index: int | str
    rollout_id: str
    verdict: str
    findings: list[Finding]
    unobserved: list[str]
    capture_observed: bool


class HealthCheckResult(BaseModel):
    rollouts: list[RolloutDigest]


# Health results by rollouts path, prepared by the benchmark: the function itself is not timed.
HEALTH_RESULTS: dict[str, HealthCheckResult] = {}


def run_health_checks(rollout_paths: str, *, output_dir: str | None = None, workers: int | None = None) -> HealthCheckResult:
    """NeMo Gym's health pass: one digest per rollout in ``rollout_paths``."""
    return HEALTH_RESULTS[rollout_paths]


_CHECKS = ("model_call_failed", "agent_turn_hollow", "model_call_runaway_generation", "rollout_token_count_mismatch")


def make_health_result(rows: Iterable[Mapping[str, Any]]) -> HealthCheckResult:
    """A digest per row: most healthy, every fifth unhealthy with one to three findings."""
    digests = []
    for number, row in enumerate(rows):
        task_index, rollout_index = row["_ng_task_index"], row["_ng_rollout_index"]
        subject = {"task_index": task_index, "rollout_index": rollout_index}
        findings = []
        if number % 5 == 0:
            findings = [
                Finding(check=_CHECKS[(number + k) % len(_CHECKS)], subject=subject, locator={"turn": k})
                for k in range(1 + number % 3)
            ]
            findings += findings[:1]  # a check that fails twice is listed once on the span
        digests.append(
            RolloutDigest(
                task_index=task_index,
                rollout_index=rollout_index,
                rollout_id=f"{task_index}-{rollout_index}",
                verdict="unhealthy" if findings else "healthy",
                findings=findings,
                unobserved=[],
                capture_observed=True,
            )
        )
    return HealthCheckResult(rollouts=digests)


# ---------------------------------------------------------------------------------------------
# The same pipeline traced by hand, inline: the baseline


class Hand:
    """The hand-written code's tracer and meter (set by the benchmark, as ``trace.get_tracer`` would)."""

    tracer: trace.Tracer = trace.NoOpTracer()
    rewarded = metrics.NoOpMeter("hand").create_counter(semconv.METRIC_REWARDED)
    # Where the idiomatic dispatch keeps its span context for the health pass, by rollout id, as
    # in-tree code that parents health spans must: None keeps nothing (the dispatch alone).
    kept: dict[str, SpanContext] | None = None

    @classmethod
    def configure(cls, tracer_provider: trace.TracerProvider, meter_provider: metrics.MeterProvider | None = None) -> None:
        cls.tracer = tracer_provider.get_tracer("hand_written")
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("hand_written")
        cls.rewarded = meter.create_counter(semconv.METRIC_REWARDED, unit="{rollout}")


def _index(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def rollout_attributes(row: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """SPEC section 2 for a flat row, by hand: the span attributes and the rollout id."""
    attributes: dict[str, Any] = {}
    for name in ("task_id", "problem_id", "instance_id", "task_name"):
        value = row.get(name)
        if value is None or value == "" or isinstance(value, bool):
            continue
        if isinstance(value, (dict, list)):
            attributes[semconv.TASK_ID] = json.dumps(value, sort_keys=True, separators=(",", ":"))
        else:
            attributes[semconv.TASK_ID] = str(value)
        break
    task_index = _index(row.get("_ng_task_index"))
    rollout_index = _index(row.get("_ng_rollout_index"))
    attempt = _index(row.get("_ng_attempt_index"))
    if rollout_index is not None:
        attributes[semconv.ROLLOUT_REPEAT] = rollout_index
    if task_index is not None:
        attributes[semconv.TASK_INDEX] = task_index
    if attempt is not None:
        attributes[semconv.ROLLOUT_ATTEMPT] = attempt
    rollout_id = row.get("_ng_rollout_id") or None
    if rollout_id is None and task_index is not None and rollout_index is not None:
        rollout_id = f"{task_index}-{rollout_index}-a{attempt}" if attempt else f"{task_index}-{rollout_index}"
    if rollout_id is not None:
        attributes[semconv.ROLLOUT_ID] = rollout_id
    agent = row.get("agent_ref")
    if isinstance(agent, dict) and agent.get("name"):
        attributes[semconv.AGENT_NAME] = agent["name"]
    return attributes, rollout_id


def error_type(exception: BaseException) -> str:
    kind = type(exception)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _record_error(span: trace.Span, exception: BaseException) -> None:
    span.set_attribute(semconv.ERROR_TYPE, error_type(exception))
    span.record_exception(exception, escaped=True)
    span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))


def _dispatch_context(span: trace.Span, rollout_id: str | None) -> context.Context:
    ctx = trace.set_span_in_context(span)
    return baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id, ctx) if rollout_id is not None else ctx


def _verify_attributes(response: VerifyResponse) -> dict[str, Any]:
    reward = response.reward
    if not response.mask_sample and type(reward) in (int, float) and math.isfinite(reward):
        return {semconv.ROLLOUT_REWARD: float(reward), semconv.VERIFY_MASKED: response.mask_sample}
    return {semconv.VERIFY_MASKED: response.mask_sample}


def _baggage_rollout_id() -> dict[str, Any]:
    rollout_id = baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID)
    return {semconv.ROLLOUT_ID: rollout_id} if isinstance(rollout_id, str) and rollout_id else {}


# Two ways of writing the same spans inline. "Lean": one start_span, one context.attach of the span
# and the baggage entry, error recording by hand, end() -- the fewest calls into the API. "Idiomatic":
# the API's documented context manager, tracer.start_as_current_span, with the baggage attached
# inside it and error.type added on the way out -- what NeMo Gym's own in-tree tracing does
# (context-manager spans).


def lean_send_row(row: dict[str, Any]) -> dict[str, Any]:
    attributes, rollout_id = rollout_attributes(row)
    span = Hand.tracer.start_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes)
    token = context.attach(_dispatch_context(span, rollout_id))
    try:
        return {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"], "reward": 1.0}
    except BaseException as exception:
        _record_error(span, exception)
        raise
    finally:
        context.detach(token)
        span.end()


def _keep(span: trace.Span, rollout_id: str | None) -> None:
    kept = Hand.kept
    if kept is not None and rollout_id is not None:
        kept[rollout_id] = span.get_span_context()


def idiomatic_send_row(row: dict[str, Any]) -> dict[str, Any]:
    attributes, rollout_id = rollout_attributes(row)
    with Hand.tracer.start_as_current_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes) as span:
        token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id)) if rollout_id is not None else None
        _keep(span, rollout_id)
        try:
            return {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"], "reward": 1.0}
        except BaseException as exception:
            span.set_attribute(semconv.ERROR_TYPE, error_type(exception))
            raise
        finally:
            if token is not None:
                context.detach(token)


def totals_attributes(result: Mapping[str, Any]) -> dict[str, Any]:
    """A rollout result's token totals, by hand: code that knows its result's shape reads them directly."""
    usage = result["response"]["usage"]
    return {
        semconv.GEN_AI_INPUT_TOKENS: usage["input_tokens"],
        semconv.GEN_AI_OUTPUT_TOKENS: usage["output_tokens"],
        semconv.ROLLOUT_MODEL_CALLS: len(result["ng_trajectory"]["model_calls"]),
    }


def lean_send_row_with_totals(row: dict[str, Any]) -> dict[str, Any]:
    attributes, rollout_id = rollout_attributes(row)
    span = Hand.tracer.start_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes)
    token = context.attach(_dispatch_context(span, rollout_id))
    try:
        result = {
            "_ng_task_index": row["_ng_task_index"],
            "_ng_rollout_index": row["_ng_rollout_index"],
            "reward": 1.0,
            "response": {"usage": ROLLOUT_USAGE},
            "ng_trajectory": {"model_calls": ROLLOUT_MODEL_CALLS},
        }
    except BaseException as exception:
        context.detach(token)
        _record_error(span, exception)
        span.end()
        raise
    context.detach(token)
    span.set_attributes(totals_attributes(result))
    span.end()
    return result


def idiomatic_send_row_with_totals(row: dict[str, Any]) -> dict[str, Any]:
    attributes, rollout_id = rollout_attributes(row)
    with Hand.tracer.start_as_current_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes) as span:
        token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id)) if rollout_id is not None else None
        _keep(span, rollout_id)
        try:
            result = {
                "_ng_task_index": row["_ng_task_index"],
                "_ng_rollout_index": row["_ng_rollout_index"],
                "reward": 1.0,
                "response": {"usage": ROLLOUT_USAGE},
                "ng_trajectory": {"model_calls": ROLLOUT_MODEL_CALLS},
            }
        except BaseException as exception:
            span.set_attribute(semconv.ERROR_TYPE, error_type(exception))
            raise
        finally:
            if token is not None:
                context.detach(token)
        span.set_attributes(totals_attributes(result))
        return result


# The hand-written twins do not subclass the plain classes: the verify target reaches subclasses.
class LeanServerClient:
    __init__ = ServerClient.__init__

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> Response:
        if url_path != "/run":
            return Response(200, await self.routes[url_path](kwargs.get("json")))
        attributes, rollout_id = rollout_attributes(kwargs["json"])
        span = Hand.tracer.start_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes)
        token = context.attach(_dispatch_context(span, rollout_id))
        try:
            return Response(200, await self.routes[url_path](kwargs.get("json")))
        except BaseException as exception:
            _record_error(span, exception)
            raise
        finally:
            context.detach(token)
            span.end()


class IdiomaticServerClient:
    __init__ = ServerClient.__init__

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> Response:
        if url_path != "/run":
            return Response(200, await self.routes[url_path](kwargs.get("json")))
        attributes, rollout_id = rollout_attributes(kwargs["json"])
        with Hand.tracer.start_as_current_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes) as span:
            token = (
                context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id)) if rollout_id is not None else None
            )
            _keep(span, rollout_id)
            try:
                return Response(200, await self.routes[url_path](kwargs.get("json")))
            except BaseException as exception:
                span.set_attribute(semconv.ERROR_TYPE, error_type(exception))
                raise
            finally:
                if token is not None:
                    context.detach(token)


class LeanResourcesServer:
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        span = Hand.tracer.start_span(semconv.SPAN_VERIFY, kind=SpanKind.INTERNAL, attributes=_baggage_rollout_id())
        token = context.attach(trace.set_span_in_context(span))
        try:
            await asyncio.sleep(0)
            response = VerifyResponse(reward=score(body))
        except BaseException as exception:
            context.detach(token)
            _record_error(span, exception)
            span.end()
            raise
        context.detach(token)
        attributes = _verify_attributes(response)
        span.set_attributes(attributes)
        if semconv.ROLLOUT_REWARD in attributes:
            Hand.rewarded.add(1)
        span.end()
        return response


class IdiomaticResourcesServer:
    async def verify(self, body: VerifyRequest) -> VerifyResponse:
        with Hand.tracer.start_as_current_span(
            semconv.SPAN_VERIFY, kind=SpanKind.INTERNAL, attributes=_baggage_rollout_id()
        ) as span:
            try:
                await asyncio.sleep(0)
                response = VerifyResponse(reward=score(body))
            except BaseException as exception:
                span.set_attribute(semconv.ERROR_TYPE, error_type(exception))
                raise
            attributes = _verify_attributes(response)
            span.set_attributes(attributes)
            if semconv.ROLLOUT_REWARD in attributes:
                Hand.rewarded.add(1)
            return response


def hand_health_spans(result: HealthCheckResult, parents: dict[str, SpanContext]) -> None:
    """One child span per verdict under its (ended) dispatch span, parents looked up by rollout id."""
    tracer = Hand.tracer
    for digest in result.rollouts:
        parent = parents.pop(digest.rollout_id, None)
        if parent is None:
            continue
        attributes = {
            semconv.HEALTH_CHECKS: sorted({finding.check for finding in digest.findings}),
            semconv.HEALTH_VERDICT: digest.verdict,
            semconv.ROLLOUT_ID: digest.rollout_id,
        }
        parent_context = trace.set_span_in_context(NonRecordingSpan(parent))
        tracer.start_span(semconv.SPAN_HEALTH, context=parent_context, kind=SpanKind.INTERNAL, attributes=attributes).end()
