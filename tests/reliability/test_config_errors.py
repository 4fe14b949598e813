"""Bad configuration: in the environment, one clear log line naming the variable or target, and
the application still starts (with what was good); in code, a ValueError with the same message."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gym_instrument import GymInstrumentor, semconv

from . import pipeline
from .support import Sink, all_logs

MODULE = pipeline.__name__
GOOD_TARGET = f"{MODULE}:dispatch=dispatch@nemo_gym"

# (variable, bad value, instrument() argument with the same bad value, what the line must name)
CASES = {
    "unknown role": ("OTEL_PYTHON_GYM_TARGETS", f"{MODULE}:verify=score", {"targets": [f"{MODULE}:verify=score"]}, "score"),
    "unimportable package": (
        "OTEL_PYTHON_GYM_TARGETS",
        "no_such_package_4c1d.rollouts:send=dispatch@nemo_gym",
        {"targets": ["no_such_package_4c1d.rollouts:send=dispatch@nemo_gym"]},
        "no_such_package_4c1d",
    ),
    "unimportable module in a package": (
        "OTEL_PYTHON_GYM_TARGETS",
        f"{MODULE.rpartition('.')[0]}.no_such_module_9e2a:send=dispatch@nemo_gym",
        {"targets": [f"{MODULE.rpartition('.')[0]}.no_such_module_9e2a:send=dispatch@nemo_gym"]},
        "no_such_module_9e2a",
    ),
    "missing attribute": (
        "OTEL_PYTHON_GYM_TARGETS",
        f"{MODULE}:no_such_function=dispatch@nemo_gym",
        {"targets": [f"{MODULE}:no_such_function=dispatch@nemo_gym"]},
        "no_such_function",
    ),
    "missing method": (
        "OTEL_PYTHON_GYM_TARGETS",
        f"{MODULE}:ServerClient.no_such_method=dispatch@nemo_gym",
        {"targets": [f"{MODULE}:ServerClient.no_such_method=dispatch@nemo_gym"]},
        "no_such_method",
    ),
    "method only inherited": (  # defined on a base class, not on the class named
        "OTEL_PYTHON_GYM_TARGETS",
        f"{MODULE}:PlainScoringServer.verify=verify@nemo_gym",
        {"targets": [f"{MODULE}:PlainScoringServer.verify=verify@nemo_gym"]},
        "PlainScoringServer",
    ),
    "malformed target": ("OTEL_PYTHON_GYM_TARGETS", "just words", {"targets": ["just words"]}, "just words"),
    "target without a role": ("OTEL_PYTHON_GYM_TARGETS", f"{MODULE}:dispatch", {"targets": [f"{MODULE}:dispatch"]}, "dispatch"),
    "unknown preset": ("OTEL_PYTHON_GYM_PRESETS", "nemo_gym,acme", {"presets": "nemo_gym,acme"}, "acme"),
    "non-integer capacity": ("OTEL_PYTHON_GYM_LINK_CAPACITY", "lots", {"link_capacity": "lots"}, "lots"),
    "fractional capacity": ("OTEL_PYTHON_GYM_LINK_CAPACITY", "1.5", {"link_capacity": "1.5"}, "1.5"),
    "zero capacity": ("OTEL_PYTHON_GYM_LINK_CAPACITY", "0", {"link_capacity": "0"}, "0"),
    "negative capacity": ("OTEL_PYTHON_GYM_LINK_CAPACITY", "-3", {"link_capacity": "-3"}, "-3"),
    "malformed boolean": ("OTEL_PYTHON_GYM_BAGGAGE", "maybe", {"baggage": "maybe"}, "maybe"),
}


@pytest.fixture
def instrumentor() -> Iterator[GymInstrumentor]:
    instrumentor = GymInstrumentor()
    yield instrumentor
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def package_errors(logs: Any) -> list[logging.LogRecord]:
    return [record for record in logs.records if record.name.startswith("gym_instrument") and record.levelno >= logging.WARNING]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_value_in_the_environment_is_one_clear_line_and_the_app_starts(
    case: str, instrumentor: GymInstrumentor, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable, value, _argument, named = CASES[case]
    if variable == "OTEL_PYTHON_GYM_TARGETS":
        value = f"{value},{GOOD_TARGET}"  # the good target beside it still applies
    else:
        monkeypatch.setenv("OTEL_PYTHON_GYM_TARGETS", GOOD_TARGET)
    monkeypatch.setenv(variable, value)
    if variable != "OTEL_PYTHON_GYM_PRESETS":
        monkeypatch.setenv("OTEL_PYTHON_GYM_PRESETS", "none")
    sink = Sink()
    with all_logs() as logs:
        instrumentor.instrument(tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider)
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0}
        assert pipeline.dispatch(row, ("return", "ok")) == "ok"
    (line,) = package_errors(logs)
    message = line.getMessage()
    assert line.levelno == logging.ERROR
    assert variable in message or named in message, message
    assert named in message, message
    # The application started, with what was good.
    assert [span.attributes[semconv.ROLLOUT_ID] for span in sink.spans(semconv.SPAN_DISPATCH)] == ["1-0"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_value_in_code_raises_value_error_with_the_same_message(
    case: str, instrumentor: GymInstrumentor, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable, value, argument, named = CASES[case]
    monkeypatch.setenv(variable, value if variable != "OTEL_PYTHON_GYM_TARGETS" else f"{value},{GOOD_TARGET}")
    if variable != "OTEL_PYTHON_GYM_PRESETS":
        monkeypatch.setenv("OTEL_PYTHON_GYM_PRESETS", "none")
    with all_logs() as logs:
        instrumentor.instrument()
    (line,) = package_errors(logs)
    instrumentor.uninstrument()

    monkeypatch.delenv(variable)
    kwargs = {"presets": "none", **argument}
    with pytest.raises(ValueError) as raised:
        instrumentor.instrument(**kwargs)
    assert not instrumentor.is_instrumented_by_opentelemetry
    assert named in str(raised.value)
    assert str(raised.value) in line.getMessage()
