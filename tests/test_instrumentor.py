"""GymInstrumentor: what one instrument() arms and records with, and what a second call adds."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest

from gym_instrument import GymInstrumentor, semconv
from gym_instrument.config.declare import preset_targets
from gym_instrument.frameworks import FRAMEWORKS, Framework
from gym_instrument.plan.engine import ENGINE
from gym_instrument.schema import GENERIC
from gym_instrument.target.find import check_importable
from tests.conftest import Telemetry

ROLLOUTS = "def send_row(row):\n    return row\n\n\ndef send_other(row):\n    return row\n"
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
    health = {"path": "gym_absent_5c1e.rollout_health:judge", "role": "health", "optional": True}
    monkeypatch.setitem(FRAMEWORKS, "absent_health", Framework("absent_health", {"targets": [health]}, GENERIC))
    name = make_module(ROLLOUTS)
    instrument(presets="absent_health", targets=[f"{name}:send_row=dispatch@nemo_gym"], link_capacity=1)
    module = importlib.import_module(name)
    for row in rows(3):
        module.send_row(row)
    assert len(telemetry.spans(semconv.SPAN_DISPATCH)) == 3
    assert len(ENGINE.links) == 0
    assert telemetry.metric_total(semconv.METRIC_LINK_EVICTIONS) == 0  # remembering 3 in a capacity of 1 evicts 2


def test_the_nemo_gym_preset_without_its_health_module_remembers_no_dispatch(
    make_module: Any, instrument: Any, telemetry: Any, no_health_decorated: None
) -> None:
    (health,) = [target for target in preset_targets("nemo_gym") if target.role == semconv.ROLE_HEALTH]
    if check_importable(health) is None:
        pytest.skip(f"{health.module} is installed here")
    name = make_module(ROLLOUTS)
    instrument(presets="nemo_gym", targets=[f"{name}:send_row=dispatch@nemo_gym"])
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
    health = {"path": f"{judge}:judge", "role": "health", "optional": True}
    monkeypatch.setitem(FRAMEWORKS, "present_health", Framework("present_health", {"targets": [health]}, GENERIC))
    name = make_module(ROLLOUTS)
    instrument(presets="present_health", targets=[f"{name}:send_row=dispatch@nemo_gym"])
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


# -- instrument() while instrumented (a script under opentelemetry-instrument) --------------------


def attempt_of(call: Any) -> dict[str, Any]:
    return {"loop.attempt.kind": "first" if call.row["_ng_rollout_index"] == 0 else "repeat"}


def test_a_second_instrument_adds_its_targets_and_extractors(
    make_module: Any, instrument: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """As under the launcher: the first call armed what the environment named, the script's call
    adds to it instead of being dropped with "Attempting to instrument while already instrumented"."""
    name = make_module(ROLLOUTS)
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    with caplog.at_level(logging.INFO):
        GymInstrumentor().instrument(targets=[f"{name}:send_other=dispatch@nemo_gym"], extractors={"dispatch": [attempt_of]})
    assert not [record for record in caplog.records if "already instrumented" in record.getMessage()]
    module = importlib.import_module(name)
    first, repeat = rows(2)
    assert module.send_row(first) == first
    assert module.send_other(repeat) == repeat
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    # Both targets traced, to the running providers; the added extractor reaches every dispatch target.
    assert [(span.attributes[semconv.ROLLOUT_ID], span.attributes["loop.attempt.kind"]) for span in spans] == [
        ("3-0", "first"),
        ("3-1", "repeat"),
    ]


def test_a_reference_taken_before_a_second_call_stays_traced_with_its_extractors(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    """``from rollouts import send_row`` before the script's own instrument(): the function stays
    wrapped (nothing is unwrapped and wrapped again), so the reference is traced and takes the
    extractor added by the second call."""
    name = make_module(ROLLOUTS)
    module = importlib.import_module(name)
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    taken = module.send_row
    GymInstrumentor().instrument(targets=[f"{name}:send_other=dispatch@nemo_gym"], extractors={"dispatch": [attempt_of]})
    assert module.send_row is taken
    first, repeat = rows(2)
    assert taken(first) == first
    assert module.send_other(repeat) == repeat
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert [(span.attributes[semconv.ROLLOUT_ID], span.attributes["loop.attempt.kind"]) for span in spans] == [
        ("3-0", "first"),
        ("3-1", "repeat"),
    ]


def test_a_second_call_without_a_preset_puts_its_targets_back(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(ROLLOUTS)
    module = importlib.import_module(name)
    original = module.send_row
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    taken = module.send_row
    GymInstrumentor().instrument(targets=[f"{name}:send_other=dispatch@nemo_gym"])
    # Code targets of a second call add to the first call's: send_row stays armed.
    assert module.send_row is taken
    GymInstrumentor().uninstrument()
    assert module.send_row is original
    taken(rows(1)[0])
    assert telemetry.spans() == []


def test_uninstrument_undoes_what_every_call_armed(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(ROLLOUTS)
    module = importlib.import_module(name)
    originals = (module.send_row, module.send_other)
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    GymInstrumentor().instrument(targets=[f"{name}:send_other=dispatch@nemo_gym"], extractors={"dispatch": [attempt_of]})
    assert module.send_row is not originals[0] and module.send_other is not originals[1]
    GymInstrumentor().uninstrument()
    assert module.send_row is originals[0] and module.send_other is originals[1]
    for row in rows(2):
        module.send_row(row)
        module.send_other(row)
    assert telemetry.spans() == []


def test_a_bad_argument_in_a_second_call_raises_and_the_running_instrumentation_stays(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    name = make_module(ROLLOUTS)
    module = importlib.import_module(name)
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym"])
    with pytest.raises(ValueError, match="has no attribute"):
        GymInstrumentor().instrument(
            targets=[f"{name}:no_such_function=dispatch@nemo_gym"], extractors={"dispatch": [attempt_of]}
        )
    assert GymInstrumentor().is_instrumented_by_opentelemetry
    module.send_row(rows(1)[0])
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert "loop.attempt.kind" not in span.attributes  # nothing of the failed call was applied


def test_a_second_call_applies_its_providers_and_keeps_the_remembered_dispatches(
    make_module: Any, instrument: Any, telemetry: Any
) -> None:
    judge, name = make_module(JUDGE), make_module(ROLLOUTS)
    instrument(targets=[f"{name}:send_row=dispatch@nemo_gym", f"{judge}:judge=health@nemo_gym"])
    module = importlib.import_module(name)
    module.send_row(rows(1)[0])  # remembered, awaiting its verdict

    script = Telemetry()
    try:
        GymInstrumentor().instrument(
            tracer_provider=script.tracer_provider,
            meter_provider=script.meter_provider,
            targets=[f"{name}:send_other=dispatch@nemo_gym"],
        )
        module.send_other(rows(2)[1])
        importlib.import_module(judge).judge([{"task_index": 3, "rollout_index": 0}])
        (before,) = telemetry.spans()
        assert before.attributes[semconv.ROLLOUT_ID] == "3-0"
        (after,) = script.spans(semconv.SPAN_DISPATCH)
        assert after.attributes[semconv.ROLLOUT_ID] == "3-1"
        # The dispatch remembered before the second call still finds its verdict.
        (health,) = script.spans(semconv.SPAN_HEALTH)
        assert (health.parent.span_id, health.context.trace_id) == (before.context.span_id, before.context.trace_id)
        assert script.metric_total(semconv.METRIC_DISPATCHES) == 1
    finally:
        GymInstrumentor().uninstrument()
        script.shutdown()
