"""SPEC section 8: instrument() arguments > OTEL_PYTHON_GYM_* variables > defaults."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest

from gym_instrument import GymInstrumentor, Target, semconv
from gym_instrument.config import GymConfig
from gym_instrument.plan import ENGINE


def test_defaults() -> None:
    config = GymConfig.resolve({}, environ={})
    assert config == GymConfig(targets=(), presets=("nemo_gym",), link_capacity=1_000_000, baggage=True)


def test_environment_over_defaults() -> None:
    environ = {
        "OTEL_PYTHON_GYM_TARGETS": "a.b:f=dispatch, c:D.g=verify",
        "OTEL_PYTHON_GYM_PRESETS": "none",
        "OTEL_PYTHON_GYM_LINK_CAPACITY": "50",
        "OTEL_PYTHON_GYM_BAGGAGE": "false",
    }
    config = GymConfig.resolve({}, environ=environ)
    assert config.targets == (Target("a.b:f", "dispatch"), Target("c:D.g", "verify"))
    assert (config.presets, config.link_capacity, config.baggage) == ((), 50, False)


def test_arguments_over_environment() -> None:
    environ = {"OTEL_PYTHON_GYM_LINK_CAPACITY": "50", "OTEL_PYTHON_GYM_BAGGAGE": "false", "OTEL_PYTHON_GYM_PRESETS": "none"}
    config = GymConfig.resolve({"link_capacity": 7, "baggage": True, "presets": ["nemo_gym"]}, environ=environ)
    assert (config.link_capacity, config.baggage, config.presets) == (7, True, ("nemo_gym",))


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_PYTHON_GYM_LINK_CAPACITY", "lots"),
        ("OTEL_PYTHON_GYM_LINK_CAPACITY", "0"),
        ("OTEL_PYTHON_GYM_BAGGAGE", "maybe"),
        ("OTEL_PYTHON_GYM_PRESETS", "langchain"),
        ("OTEL_PYTHON_GYM_TARGETS", "not-a-target"),
    ],
)
def test_bad_environment_value_is_logged_by_name_and_skipped(variable: str, value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        config = GymConfig.resolve({}, environ={variable: value})
    assert config == GymConfig()
    (record,) = caplog.records
    assert variable in record.getMessage()


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("link_capacity", "lots", "link capacity"),
        ("link_capacity", 0, "link capacity"),
        ("link_capacity", True, "link capacity"),
        ("baggage", "maybe", "true or false"),
        ("presets", ["langchain"], "unknown preset"),
        ("targets", ["a.b:f=judge"], "unknown role"),
        ("targets", ["no_such_package_xyz:f=dispatch"], "no module named"),
        ("targets", ["json:no_such_function=dispatch"], "has no attribute"),
        ("extractors", {"judge": [print]}, "unknown role"),
        ("extractors", {"verify": ["not callable"]}, "callables"),
        ("replace_default_extractors", ["judge"], "unknown role"),
    ],
)
def test_bad_argument_raises_value_error(argument: str, value: Any, message: str, telemetry: Any) -> None:
    instrumentor = GymInstrumentor()
    with pytest.raises(ValueError, match=message):
        instrumentor.instrument(**{"tracer_provider": telemetry.tracer_provider, "presets": "none", argument: value})
    assert not instrumentor.is_instrumented_by_opentelemetry


def test_link_capacity_and_baggage_reach_the_engine(instrument: Any) -> None:
    instrument(link_capacity=12, baggage=False)
    assert ENGINE.links.capacity == 12
    assert ENGINE.propagate_baggage is False


def test_environment_targets_instrument(
    make_module: Any, monkeypatch: pytest.MonkeyPatch, instrument: Any, telemetry: Any
) -> None:
    name = make_module()
    monkeypatch.setenv("OTEL_PYTHON_GYM_TARGETS", f"{name}:send_row=dispatch")
    instrument()
    importlib.import_module(name).send_row({"task_id": "env"})
    assert [span.attributes[semconv.TASK_ID] for span in telemetry.spans()] == ["env"]
