"""GymInstrumentor: what one instrument() arms and records with, and what a second call adds."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from gym_instrument import Target, semconv
from gym_instrument.presets import PRESETS
from gym_instrument.roles import ENGINE
from gym_instrument.targets import check_importable

ROLLOUTS = "def send_row(row):\n    return row\n"
JUDGE = "def judge(rollouts):\n    return [dict(r, verdict='healthy') for r in rollouts]\n"


def rows(count: int) -> list[dict[str, int]]:
    return [{"_ng_task_index": 3, "_ng_rollout_index": index} for index in range(count)]


@pytest.fixture
def no_health_decorated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ENGINE, "health_decorated", False)  # whatever other tests decorated


# -- the dispatch memory: only where a verdict can come ------------------------------------------


def test_a_health_target_whose_module_is_absent_remembers_no_dispatch(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch, no_health_decorated: None
) -> None:
    """A preset's health target for a framework version without it (nemo-gym 0.4.0 has no
    rollout_health): no verdict can come, so the memory stays empty and never evicts."""
    monkeypatch.setitem(PRESETS, "absent_health", (Target("gym_absent_5c1e.rollout_health:judge", "health", optional=True),))
    name = make_module(ROLLOUTS)
    instrument(presets="absent_health", targets=[f"{name}:send_row=dispatch"], link_capacity=1)
    module = importlib.import_module(name)
    for row in rows(3):
        module.send_row(row)
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 3
    assert len(ENGINE.links) == 0
    assert telemetry.metric_total(semconv.METRIC_LINK_EVICTIONS) == 0  # remembering 3 in a capacity of 1 evicts 2


def test_the_nemo_gym_preset_without_its_health_module_remembers_no_dispatch(
    make_module: Any, instrument: Any, telemetry: Any, no_health_decorated: None
) -> None:
    (health,) = [target for target in PRESETS["nemo_gym"] if target.role == semconv.ROLE_HEALTH]
    if check_importable(health) is None:
        pytest.skip(f"{health.module} is installed here")
    name = make_module(ROLLOUTS)
    instrument(presets="nemo_gym", targets=[f"{name}:send_row=dispatch"])
    module = importlib.import_module(name)
    for row in rows(3):
        module.send_row(row)
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 3
    assert len(ENGINE.links) == 0


def test_a_health_target_whose_module_exists_remembers_and_its_verdicts_are_children(
    make_module: Any, instrument: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch, no_health_decorated: None
) -> None:
    """The same preset target, with its module on sys.path (not imported until the health pass)."""
    judge = make_module(JUDGE)
    monkeypatch.setitem(PRESETS, "present_health", (Target(f"{judge}:judge", "health", optional=True),))
    name = make_module(ROLLOUTS)
    instrument(presets="present_health", targets=[f"{name}:send_row=dispatch"])
    module = importlib.import_module(name)
    for row in rows(2):
        module.send_row(row)
    assert len(ENGINE.links) == 2

    importlib.import_module(judge).judge([{"task_index": 3, "rollout_index": index} for index in range(2)])
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    health = telemetry.spans(semconv.SPAN_HEALTH)
    assert sorted(span.attributes[semconv.ROLLOUT_ID] for span in health) == ["3-0", "3-1"]
    for span in health:
        parent = dispatches[span.attributes[semconv.ROLLOUT_ID]]
        assert span.parent.span_id == parent.context.span_id
        assert span.context.trace_id == parent.context.trace_id
        assert span.attributes[semconv.HEALTH_VERDICT] == "healthy"
    assert len(ENGINE.links) == 0  # each verdict took its dispatch
