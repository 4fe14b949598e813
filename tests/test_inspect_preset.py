"""The inspect-ai preset on the real inspect-ai wheel (0.3.285) and the real OpenTelemetry SDK.

Each scenario is one real evaluation in a process of its own (``tests/inspect_run.py``): the mock
model, the built-in letter scorer ``includes``, 3 samples x 2 epochs, with ``fail_on_error=False``.
What it checks is what a user sees: per sample-epoch of inspect's own log, one dispatch span and
one verify span in its trace, their attributes and status.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym_instrument import semconv
from gym_instrument.config.declare import preset_targets
from gym_instrument.config.settings import DEFAULT_PRESETS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None, reason="inspect-ai is not installed")

RUNNER = Path(__file__).with_name("inspect_run.py")


def _evaluate(tmp_path_factory: pytest.TempPathFactory, *flags: str) -> dict[str, Any]:
    log_dir = tmp_path_factory.mktemp("inspect-logs")
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(log_dir), *flags], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _evaluate(tmp_path_factory)


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _evaluate(tmp_path_factory, "--retry")


def _by_rollout(spans: list[dict[str, Any]], name: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        if span["name"] == name:
            found.setdefault(span["attributes"].get(semconv.ROLLOUT_ID), []).append(span)
    return found


def test_the_preset_is_armed_by_default_and_is_data() -> None:
    assert "inspect_ai" in DEFAULT_PRESETS
    targets = preset_targets("inspect_ai")
    assert [(target.path, target.role) for target in targets] == [
        ("inspect_ai.log._samples:active_sample", "dispatch"),
        ("inspect_ai.hooks._hooks:emit_sample_end", "verify"),
    ]
    assert all(target.optional for target in targets)


def test_one_dispatch_per_sample_epoch_with_task_id_zero_based_repeat_and_rollout_id(run: dict[str, Any]) -> None:
    dispatches = _by_rollout(run["spans"], semconv.SPAN_DISPATCH)
    assert len(run["samples"]) == 6
    for sample in run["samples"]:
        (dispatch,) = dispatches[sample["uuid"]]
        attributes = dispatch["attributes"]
        assert attributes[semconv.TASK_ID] == str(sample["id"])  # an int id (7) is rendered as a string
        assert attributes[semconv.ROLLOUT_REPEAT] == sample["epoch"] - 1
        assert attributes[semconv.ROLLOUT_ATTEMPT] == 0
        assert attributes[semconv.FRAMEWORK] == "inspect_ai"
        assert dispatch["parent"] is None
    assert sum(map(len, dispatches.values())) == 6


def test_one_verify_in_the_dispatch_trace_with_the_letter_mapped_to_a_reward(run: dict[str, Any]) -> None:
    dispatches = _by_rollout(run["spans"], semconv.SPAN_DISPATCH)
    verifies = _by_rollout(run["spans"], semconv.SPAN_VERIFY)
    letters = {"C": 1.0, "I": 0.0}
    for sample in run["samples"]:
        (dispatch,) = dispatches[sample["uuid"]]
        (verify,) = verifies[sample["uuid"]]
        assert (verify["trace_id"], verify["parent"]) == (dispatch["trace_id"], dispatch["span_id"])
        assert verify["attributes"][semconv.FRAMEWORK] == "inspect_ai"
        if sample["value"] is None:
            assert semconv.ROLLOUT_REWARD not in verify["attributes"]
        else:
            assert verify["attributes"][semconv.ROLLOUT_REWARD] == letters[sample["value"]]
    assert {sample["value"] for sample in run["samples"]} == {"C", "I", None}


def test_an_errored_sample_fails_its_dispatch_and_its_verify(run: dict[str, Any]) -> None:
    dispatches = _by_rollout(run["spans"], semconv.SPAN_DISPATCH)
    verifies = _by_rollout(run["spans"], semconv.SPAN_VERIFY)
    errored = [sample for sample in run["samples"] if sample["error"]]
    assert [sample["id"] for sample in errored] == ["boom", "boom"]
    for sample in run["samples"]:
        for span in (*dispatches[sample["uuid"]], *verifies[sample["uuid"]]):
            if sample["error"]:
                assert span["status"] == "ERROR"
                assert span["attributes"][semconv.ERROR_TYPE] == semconv.ERROR_TYPE_OTHER
            else:
                assert span["status"] == "UNSET" and semconv.ERROR_TYPE not in span["attributes"]


def test_a_retried_sample_is_a_second_attempt_of_the_same_rollout(retried: dict[str, Any]) -> None:
    dispatches = _by_rollout(retried["spans"], semconv.SPAN_DISPATCH)
    verifies = _by_rollout(retried["spans"], semconv.SPAN_VERIFY)
    flaky = [sample for sample in retried["samples"] if sample["id"] == "flaky"]
    assert [sample["retries"] for sample in flaky] == [1, 1]
    for sample in flaky:
        attempts = dispatches[sample["uuid"]]
        assert [span["attributes"][semconv.ROLLOUT_ATTEMPT] for span in attempts] == [0, 1]
        assert {span["attributes"][semconv.ROLLOUT_REPEAT] for span in attempts} == {sample["epoch"] - 1}
        (verify,) = verifies[sample["uuid"]]  # only the attempt that completed is scored
        assert verify["parent"] == attempts[1]["span_id"]
