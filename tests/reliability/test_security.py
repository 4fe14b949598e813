"""Security: row content never leaves the process through the package, at any log level, and
metrics never grow an attribute set per task or rollout.

Canaries sit in prompts, responses, API-key-like fields, arbitrary row fields, verify requests
and results, health findings, in the message of an extractor's exception (a pydantic
``ValidationError`` quotes the row it rejected) and of a hostile object's. The test then reads
what a user's backends would receive: the OTLP bytes of every span and metric point, every log
record of every logger at DEBUG (tracebacks included), stdout and stderr, and the headers a
downstream call would carry (W3C baggage crosses every hop, external model APIs included).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry import propagate
from pydantic import BaseModel

from gym_instrument import Target, semconv
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM

from . import hostile, pipeline
from .support import Sink, all_logs, assert_exportable, instrumented, metrics_payload

CANARIES = {
    "prompt": "canary-prompt-3b1e",
    "response": "canary-response-9c0d",
    "api_key": "sk-canary-key-51f7",
    "authorization": "Bearer canary-token-a2e9",
    "row_field": "canary-field-77aa",
    "request": "canary-request-0f3c",
    "failure_reason": "canary-judge-6d4b",
    "finding": "canary-finding-e81c",
    "validation": "canary-validation-2c5d",
}


class StrictRow(BaseModel):
    """What a user's extractor might validate rows against; it rejects every row here."""

    task_id: int
    prompt: int


def validating_extractor(call: Any) -> dict[str, Any]:
    # Raises pydantic's ValidationError, whose message quotes the rejected input (the prompt).
    StrictRow.model_validate({"task_id": "x", "prompt": f"{CANARIES['validation']} {call.row!r}"})
    return {}


def raising_extractor(call: Any) -> dict[str, Any]:
    raise KeyError(f"missing field in {call.row}")  # the message holds the whole row


def hostile_reading_extractor(call: Any) -> dict[str, Any]:
    return {"my.attribute": hostile.RaisingGetattr().anything}


class VerifyResponse(BaseModel):
    """Shaped like NeMo Gym's BaseVerifyResponse, with the response and the judge's reasoning."""

    reward: float
    response: dict[str, Any]
    failure_reason: str | None = None
    failure_kind: str | None = None
    mask_sample: bool = False


class CanaryVerifyServer(pipeline.SimpleResourcesServer):
    def __init__(self) -> None:
        self.outgoing_headers: list[dict[str, str]] = []

    async def verify(self, body: pipeline.VerifyRequest) -> VerifyResponse:  # type: ignore[override]
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the headers a call to an external model API would carry
        self.outgoing_headers.append(carrier)
        return VerifyResponse(
            reward=body.answer,
            response={"output_text": CANARIES["response"]},
            failure_reason=CANARIES["failure_reason"],
            failure_kind="judge_failed",
        )


def canary_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "_ng_task_index": index,
            "_ng_rollout_index": 0,
            "agent_ref": {"name": "simple_agent"},
            "responses_create_params": {"input": [{"role": "user", "content": CANARIES["prompt"]}]},
            "api_key": CANARIES["api_key"],
            "headers": {"Authorization": CANARIES["authorization"]},
            "metadata": {"notes": CANARIES["row_field"], "nested": [CANARIES["row_field"]]},
            "prompt": CANARIES["prompt"],
        }
        for index in range(count)
    ]


def test_canaries_never_leave_through_spans_metrics_logs_or_headers(capfd: pytest.CaptureFixture[str]) -> None:
    sink = Sink()
    rows = canary_rows(20)
    server = CanaryVerifyServer()

    async def collect() -> Any:
        client = pipeline.ServerClient(server)
        results = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in rows))
        for result in results:
            result["output"] = CANARIES["response"]
        verdicts = [
            {
                "task_index": row["_ng_task_index"],
                "rollout_index": 0,
                "rollout_id": f"{row['_ng_task_index']}-0",
                "verdict": "unhealthy",
                "findings": [
                    {"check": "model_call_failed", "detail": {"message": CANARIES["finding"]}, "locator": CANARIES["finding"]}
                ],
                "unobserved": [CANARIES["finding"]],
            }
            for row in rows
        ]
        await asyncio.to_thread(pipeline.health_pass, results, ("return", {"rollouts": verdicts}))
        return results

    extractors = {"dispatch": [validating_extractor, raising_extractor, hostile_reading_extractor], "verify": [raising_extractor]}
    with all_logs() as logs:
        with instrumented(sink, pipeline.targets(), extractors=extractors):
            results = asyncio.run(collect())
            # Rows that fight back: a hostile row object, and one whose fields raise with a canary.
            pipeline.dispatch(hostile.RaisingGetattr(), ("return", None))
            pipeline.verify(
                hostile.RaisingEverything(), ("return", {"reward": 1.0, "failure_reason": CANARIES["failure_reason"]})
            )
            request = {"_ng_rollout_id": "r-1", "responses_create_params": {"input": CANARIES["request"]}}
            pipeline.verify(request, ("return", {"reward": 1.0, "response": {"output_text": CANARIES["response"]}}))
        data = sink.metrics_data()

    assert [result["reward"] for result in results] == [pipeline.expected_reward(row["_ng_task_index"], 0) for row in rows]
    spans = sink.spans()
    assert len(sink.spans(semconv.SPAN_DISPATCH)) == len(rows) + 1
    assert len(sink.spans(semconv.SPAN_HEALTH)) == len(rows)
    assert len(sink.spans(semconv.SPAN_VERIFY)) == len(rows) + 2
    span_bytes = assert_exportable(spans)
    metric_bytes = metrics_payload(data)
    assert metric_bytes
    # The extractors' failures were logged (once each), with where they failed.
    failures = [
        record for record in logs.records if record.name.startswith("gym_instrument") and record.levelno >= logging.WARNING
    ]
    assert len(failures) >= 3
    assert any("ValidationError" in line for line in logs.lines)
    outgoing = "\n".join(str(headers) for headers in server.outgoing_headers)
    assert "nemo.gym.rollout.id" in outgoing  # the rollout id does travel, by design
    printed = capfd.readouterr()
    for name, canary in CANARIES.items():
        assert canary.encode() not in span_bytes, f"{name} canary exported in a span"
        assert canary.encode() not in metric_bytes, f"{name} canary exported in a metric"
        assert canary not in logs.text(), f"{name} canary in a log line"
        assert canary not in outgoing, f"{name} canary in outgoing headers"
        assert canary not in printed.out + printed.err, f"{name} canary printed"
    assert hostile.HOSTILE_SECRET not in logs.text() + printed.out + printed.err
    assert hostile.HOSTILE_SECRET.encode() not in span_bytes


def test_metric_attribute_sets_stay_constant_over_ten_thousand_distinct_ids() -> None:
    """10,000 distinct task ids, rollout ids, rewards and free-text verdicts: the number of metric
    attribute sets after 10,000 rollouts is the number after the first 100."""
    sink = Sink()
    targets = [*pipeline.targets(), Target(f"{pipeline.__name__}:dispatch_calling", "dispatch", schema=NEMO_GYM)]

    def rollout(index: int) -> None:
        row = {
            "task_id": f"task-{index}",
            "_ng_task_index": index,
            "_ng_rollout_index": index % 7,
            "_ng_rollout_id": f"rollout-{index}",
            "agent_ref": {"name": f"agent-{index}"},
        }
        request = {"_ng_rollout_id": f"rollout-{index}"}
        result = {"reward": index / 7, "mask_sample": index % 11 == 0, "failure_kind": f"kind-{index}"}
        outcome = ("raise", ValueError(f"failure {index}")) if index % 13 == 0 else ("return", row)
        try:
            pipeline.dispatch_calling(row, lambda: pipeline.verify(request, ("return", result)))
            pipeline.dispatch(row, outcome)
        except ValueError:
            pass
        verdict = ["healthy", "unhealthy", "unobserved", f"free-text verdict {index}"][index % 4]
        findings = [{"check": f"check-{index}"}]
        pipeline.health_pass([], ("return", [{"rollout_id": f"rollout-{index}", "verdict": verdict, "findings": findings}]))

    def attribute_sets() -> set[tuple[str, frozenset[tuple[str, Any]]]]:
        data = sink.metrics_data()
        return {
            (metric.name, frozenset((point.attributes or {}).items()))
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
        }

    with instrumented(sink, targets, link_capacity=50):  # evictions too, counted in gym.link.evictions
        for index in range(100):
            rollout(index)
        after_100 = attribute_sets()
        for index in range(100, 10_000):
            rollout(index)
        after_10_000 = attribute_sets()

    assert after_10_000 == after_100
    assert len(after_10_000) <= 12
    names = {name for name, _attributes in after_10_000}
    assert {semconv.METRIC_REWARDED, semconv.METRIC_DISPATCHES, semconv.METRIC_VERDICTS} <= names
    for _name, attributes in after_10_000:
        for _key, value in attributes:
            assert value in {"ok", "error", "cancelled", "healthy", "unhealthy", "unobserved", "other"}
    assert sink.metric_total(semconv.METRIC_REWARDED) == sum(1 for index in range(10_000) if index % 11 != 0)
