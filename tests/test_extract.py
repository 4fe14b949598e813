"""SPEC sections 2-4: the attribute rules, observed on exported spans."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from gym_instrument import semconv
from tests.conftest import load_jsonl

TASK_ID = semconv.TASK_ID


def dispatched(pipeline: Any, telemetry: Any, row: Any) -> dict[str, Any]:
    pipeline.send_row(row)
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    telemetry.exporter.clear()
    return dict(span.attributes)


# -- task id ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"task_id": "t-1", "problem_id": "p", "instance_id": "i", "task_name": "n"}, "t-1"),
        ({"problem_id": "p", "instance_id": "i", "task_name": "n"}, "p"),
        ({"instance_id": "i", "task_name": "n"}, "i"),
        ({"task_name": "n"}, "n"),
        ({"task_id": None, "problem_id": "", "instance_id": "i"}, "i"),
        ({"task_id": "", "task_name": "n"}, "n"),
        ({"task_id": 0}, "0"),
        ({"task_id": 42, "problem_id": "p"}, "42"),
        ({"task_id": True, "problem_id": "p"}, "p"),
        ({"task_id": False, "instance_id": 7}, "7"),
        ({"task_id": 1.5}, "1.5"),
        ({"task_id": {"taskset": "mcqa", "index": 3}}, '{"index":3,"taskset":"mcqa"}'),
        ({"task_id": ["a", 1, {"b": 2, "a": 1}]}, '["a",1,{"a":1,"b":2}]'),
    ],
)
def test_task_id_precedence_and_rendering(pipeline: Any, telemetry: Any, row: dict[str, Any], expected: str) -> None:
    assert dispatched(pipeline, telemetry, row)[TASK_ID] == expected


@pytest.mark.parametrize(
    "row",
    [
        {},
        {"uuid": "3c26f339-4b88-54be-b72a-e9c438ca6335"},
        {"task_id": None, "problem_id": "", "instance_id": None, "task_name": ""},
        {"task_id": True},
        {"task_id": object()},
    ],
)
def test_task_id_omitted_when_the_row_has_none(pipeline: Any, telemetry: Any, row: dict[str, Any]) -> None:
    assert TASK_ID not in dispatched(pipeline, telemetry, row)


def test_real_nemo_gym_rows_have_no_task_id_and_carry_indices(pipeline: Any, telemetry: Any) -> None:
    for row in load_jsonl("mcqa_inputs.jsonl"):
        attributes = dispatched(pipeline, telemetry, row)
        assert TASK_ID not in attributes  # mcqa rows carry uuid, which is not a task id
        assert attributes[semconv.ROLLOUT_REPEAT] == row["_ng_rollout_index"]
        assert attributes[semconv.TASK_INDEX] == row["_ng_task_index"]
        assert attributes[semconv.ROLLOUT_ID] == f"{row['_ng_task_index']}-{row['_ng_rollout_index']}"
        assert attributes[semconv.AGENT_NAME] == "mcqa_simple_agent"


def test_pydantic_row(pipeline: Any, telemetry: Any) -> None:
    class Row(BaseModel):
        model_config = ConfigDict(extra="allow")
        problem_id: str
        agent_ref: dict[str, str]

    attributes = dispatched(pipeline, telemetry, Row(problem_id="p-9", agent_ref={"name": "agent"}))
    assert attributes[TASK_ID] == "p-9"
    assert attributes[semconv.AGENT_NAME] == "agent"


# -- indices and rollout id -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "repeat", "task_index", "attempt", "rollout_id"),
    [
        ({"_ng_task_index": 3, "_ng_rollout_index": 1}, 1, 3, None, "3-1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 0}, 1, 3, 0, "3-1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 2}, 1, 3, 2, "3-1-a2"),
        ({"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_rollout_id": "custom.id_1"}, 0, 0, None, "custom.id_1"),
        ({"_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_rollout_id": ""}, 0, 0, None, "0-0"),
        ({"_ng_rollout_index": 2}, 2, None, None, None),
        ({"_ng_task_index": 4}, None, 4, None, None),
        ({"_ng_task_index": True, "_ng_rollout_index": False}, None, None, None, None),
        ({"_ng_task_index": -1, "_ng_rollout_index": 1.0}, None, None, None, None),
        ({"_ng_task_index": "3", "_ng_rollout_index": "1"}, None, None, None, None),
        ({"_ng_task_index": 2**63, "_ng_rollout_index": 0}, 0, None, None, None),
    ],
)
def test_indices_and_rollout_id(
    pipeline: Any,
    telemetry: Any,
    row: dict[str, Any],
    repeat: int | None,
    task_index: int | None,
    attempt: int | None,
    rollout_id: str | None,
) -> None:
    attributes = dispatched(pipeline, telemetry, row)
    assert attributes.get(semconv.ROLLOUT_REPEAT) == repeat
    assert attributes.get(semconv.TASK_INDEX) == task_index
    assert attributes.get(semconv.ROLLOUT_ATTEMPT) == attempt
    assert attributes.get(semconv.ROLLOUT_ID) == rollout_id
    for key in (semconv.ROLLOUT_REPEAT, semconv.TASK_INDEX, semconv.ROLLOUT_ATTEMPT):
        if key in attributes:
            assert type(attributes[key]) is int


def test_native_episode_body(pipeline: Any, telemetry: Any) -> None:
    body = {
        "episode_id": {"rollout_id": "ep-7f3a", "attempt": 1},
        "task": {"task_id": {"taskset": "mcqa", "index": 12}, "task_input": {"question": "q"}},
    }
    attributes = dispatched(pipeline, telemetry, body)
    assert attributes[semconv.ROLLOUT_ID] == "ep-7f3a"
    assert attributes[TASK_ID] == '{"index":12,"taskset":"mcqa"}'
    assert attributes[semconv.ROLLOUT_ATTEMPT] == 1


def test_attributes_are_there_when_the_span_starts(pipeline: Any, telemetry: Any) -> None:
    seen: list[dict[str, Any]] = []

    class Watching:
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            seen.append(dict(span.attributes))

        def on_end(self, span: Any) -> None:
            pass

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 0) -> bool:
            return True

    telemetry.tracer_provider.add_span_processor(Watching())
    pipeline.send_row({"task_id": "t", "_ng_task_index": 1, "_ng_rollout_index": 0})
    assert seen == [{TASK_ID: "t", semconv.ROLLOUT_REPEAT: 0, semconv.TASK_INDEX: 1, semconv.ROLLOUT_ID: "1-0"}]


# -- reward ----------------------------------------------------------------------------------


class RewardObject:
    def __init__(self, reward: Any, mask_sample: Any = None) -> None:
        self.reward = reward
        if mask_sample is not None:
            self.mask_sample = mask_sample


class VerifyResponse(BaseModel):
    reward: float
    mask_sample: bool = False
    failure_kind: str | None = None


@pytest.mark.parametrize(
    ("result", "reward"),
    [
        ({"reward": 1}, 1.0),
        ({"reward": 0}, 0.0),
        ({"reward": 0.25}, 0.25),
        ({"reward": -3.5}, -3.5),
        ({"reward": True}, None),
        ({"reward": False}, None),
        ({"reward": math.nan}, None),
        ({"reward": math.inf}, None),
        ({"reward": -math.inf}, None),
        ({"reward": "1.0"}, None),
        ({"reward": None}, None),
        ({}, None),
        ({"reward": 10**400}, None),
        ({"reward": 1.0, "mask_sample": True}, None),
        ({"reward": 1.0, "mask_sample": False}, 1.0),
        (RewardObject(0.5), 0.5),
        (RewardObject(0.5, mask_sample=True), None),
        (VerifyResponse(reward=1.0), 1.0),
        (VerifyResponse(reward=1.0, mask_sample=True), None),
        (0.75, 0.75),
        (2, 2.0),
        (True, None),
        (math.nan, None),
        ("0.5", None),
        (None, None),
    ],
)
def test_reward_only_when_numeric_and_unmasked(pipeline: Any, telemetry: Any, result: Any, reward: float | None) -> None:
    returned = pipeline.score({"result": result})
    assert returned is result
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    if reward is None:
        assert semconv.ROLLOUT_REWARD not in span.attributes
    else:
        assert span.attributes[semconv.ROLLOUT_REWARD] == reward
        assert type(span.attributes[semconv.ROLLOUT_REWARD]) is float


def test_masked_flag_and_failure_kind(pipeline: Any, telemetry: Any) -> None:
    pipeline.score({"result": VerifyResponse(reward=0.0, mask_sample=True, failure_kind="judge_failed")})
    pipeline.score({"result": {"reward": 1.0, "mask_sample": False}})
    masked, unmasked = telemetry.spans(semconv.SPAN_VERIFY)
    assert masked.attributes[semconv.VERIFY_MASKED] is True
    assert masked.attributes[semconv.FAILURE_KIND] == "judge_failed"
    assert semconv.ROLLOUT_REWARD not in masked.attributes
    assert unmasked.attributes[semconv.VERIFY_MASKED] is False
    assert semconv.FAILURE_KIND not in unmasked.attributes


def test_reward_from_real_nemo_gym_outputs(pipeline: Any, telemetry: Any) -> None:
    rows = load_jsonl("mcqa_rollouts.jsonl")
    for row in rows:
        pipeline.score({"result": row})
    assert [span.attributes[semconv.ROLLOUT_REWARD] for span in telemetry.spans(semconv.SPAN_VERIFY)] == [
        row["reward"] for row in rows
    ]


# -- verify's rollout id ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_body", "rollout_id"),
    [
        ({"_ng_rollout_id": "r-1", "_ng_task_index": 1, "_ng_rollout_index": 1}, "r-1"),
        ({"capture_rollout_id": "cap-2"}, "cap-2"),
        ({"_ng_task_index": 1, "_ng_rollout_index": 0}, "1-0"),
        ({"_ng_task_index": 1, "_ng_rollout_index": 0, "_ng_attempt_index": 3}, "1-0-a3"),
    ],
)
def test_verify_rollout_id_from_the_request(pipeline: Any, telemetry: Any, request_body: dict[str, Any], rollout_id: str) -> None:
    pipeline.score({**request_body, "result": {"reward": 1.0}})
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.attributes[semconv.ROLLOUT_ID] == rollout_id


def test_verify_rollout_id_from_baggage_when_the_request_has_none(pipeline: Any, telemetry: Any) -> None:
    """The flat-row path: verify's request model drops _ng_* keys; the id arrives as baggage."""
    agent = pipeline.Agent(pipeline.McqaResourcesServer())
    result = asyncio.run(agent.run({"_ng_task_index": 5, "_ng_rollout_index": 1, "result": {"reward": 1.0}}))
    assert result == {"reward": 1.0}
    (dispatch_span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    (verify_span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert verify_span.attributes[semconv.ROLLOUT_ID] == "5-1" == dispatch_span.attributes[semconv.ROLLOUT_ID]
    assert verify_span.parent.span_id == dispatch_span.context.span_id


def test_verify_outside_a_dispatch_has_no_rollout_id(pipeline: Any, telemetry: Any) -> None:
    asyncio.run(pipeline.McqaResourcesServer().verify({"result": {"reward": 1.0}}))
    (verify_span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert semconv.ROLLOUT_ID not in verify_span.attributes
