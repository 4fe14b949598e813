"""SPEC section 8: instrument() arguments > OTEL_PYTHON_GYM_* variables > defaults."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest

from gym_instrument import GymInstrumentor, Target, semconv
from gym_instrument.config.settings import GymConfig
from gym_instrument.plan.engine import ENGINE


def test_defaults() -> None:
    config = GymConfig.resolve({}, environ={})
    # Every shipped preset is armed by default: each only arms a post-import hook for its framework.
    assert config == GymConfig(targets=(), presets=("nemo_gym", "verifiers", "inspect_ai"), link_capacity=1_000_000, baggage=True)


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


def test_every_setting_is_declared_once_with_its_variable() -> None:
    settings = GymConfig.settings()
    assert set(settings) == {spec for spec in GymConfig.__dataclass_fields__}
    variables = {name: setting.env for name, setting in settings.items()}
    assert variables == {
        "targets": "OTEL_PYTHON_GYM_TARGETS",
        "link_dir": "OTEL_PYTHON_GYM_LINK_DIR",
        "link_files": "OTEL_PYTHON_GYM_LINK_FILES",
        "presets": "OTEL_PYTHON_GYM_PRESETS",
        "link_capacity": "OTEL_PYTHON_GYM_LINK_CAPACITY",
        "baggage": "OTEL_PYTHON_GYM_BAGGAGE",
        "job_context": "OTEL_PYTHON_GYM_JOB_CONTEXT",
        "propagation": "OTEL_PYTHON_GYM_PROPAGATION",
        "server_telemetry": "OTEL_PYTHON_GYM_SERVER_TELEMETRY",
        "model_calls": "OTEL_PYTHON_GYM_MODEL_CALLS",
        "train_step": "OTEL_PYTHON_GYM_TRAIN_STEP",
        "config": "OTEL_PYTHON_GYM_CONFIG",
        "extractors": None,  # code only
        "replace_default_extractors": None,
        "tracer_provider": None,
        "meter_provider": None,
    }


def test_extractors_and_replaced_roles_are_settings() -> None:
    def mark(call: Any) -> dict[str, Any]:
        return {"mark": 1}

    config = GymConfig.resolve({"extractors": {"verify": mark}, "replace_default_extractors": "verify"}, environ={})
    assert dict(config.extractors) == {"verify": (mark,)}
    assert config.replace_default_extractors == frozenset({"verify"})
    assert (dict(GymConfig().extractors), GymConfig().replace_default_extractors) == ({}, frozenset())


def test_a_code_only_setting_has_no_variable() -> None:
    config = GymConfig.resolve({}, environ={"OTEL_PYTHON_GYM_EXTRACTORS": "os:system", "OTEL_PYTHON_GYM_TRACER_PROVIDER": "x"})
    assert config == GymConfig()


def test_one_bad_target_in_the_environment_is_skipped_and_the_others_apply(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"OTEL_PYTHON_GYM_TARGETS": "a.b:f=dispatch,a.b:g=judge,c:h=verify"}
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        config = GymConfig.resolve({}, environ=environ)
    assert config.targets == (Target("a.b:f", "dispatch"), Target("c:h", "verify"))
    (record,) = caplog.records
    assert "OTEL_PYTHON_GYM_TARGETS" in record.getMessage() and "judge" in record.getMessage()


def test_checked_resolve_skips_a_target_this_interpreter_cannot_find(caplog: pytest.LogCaptureFixture) -> None:
    environ = {"OTEL_PYTHON_GYM_TARGETS": "json:dumps=dispatch,no_such_package_7f3e:f=verify,json:no_such_fn=verify"}
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        config = GymConfig.resolve({}, environ=environ, check=True)
    assert config.targets == (Target("json:dumps", "dispatch"),)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and all("OTEL_PYTHON_GYM_TARGETS" in message for message in messages)
    with pytest.raises(ValueError, match="no module named 'no_such_package_7f3e'"):
        GymConfig.resolve({"targets": ["no_such_package_7f3e:f=verify"]}, environ={}, check=True)


def test_a_later_call_adds_targets_and_extractors_and_replaces_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    def first(call: Any) -> None:
        return None

    def second(call: Any) -> None:
        return None

    environ = {"OTEL_PYTHON_GYM_TARGETS": "a:f=dispatch", "OTEL_PYTHON_GYM_LINK_CAPACITY": "lots"}
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        running = GymConfig.resolve({"extractors": {"verify": [first]}, "baggage": False}, environ=environ)
        later = GymConfig.resolve(
            {"targets": ["b:g=verify", "a:f=dispatch"], "extractors": {"verify": [second, first]}, "link_capacity": 9},
            environ=environ,
            running=running,
        )
    assert later.targets == (Target("a:f", "dispatch"), Target("b:g", "verify"))
    assert dict(later.extractors) == {"verify": (first, second)}
    assert (later.link_capacity, later.baggage) == (9, False)  # given: replaced; not given: as it runs
    assert len(caplog.records) == 1  # the bad variable was logged once, by the first call only


PIPELINE = "class Collector:\n    def dispatch(self, row):\n        return row\n"


@pytest.mark.parametrize(
    ("typo", "nearest"),
    [("Colector.dispatch", "'Collector'"), ("Collector.dispach", "'dispatch'")],
)
def test_a_typo_in_a_variable_names_the_variable_and_the_nearest_name(
    make_module: Any, instrument: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, typo: str, nearest: str
) -> None:
    """The module is imported after instrument() (a post-import hook): the line names the variable and
    the right name, and blames no circular import."""
    name = make_module(PIPELINE)
    monkeypatch.setenv("OTEL_PYTHON_GYM_TARGETS", f"{name}:{typo}=dispatch")
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        instrument(presets="none")
        assert importlib.import_module(name).Collector().dispatch({"a": 1}) == {"a": 1}
    (message,) = [record.getMessage() for record in caplog.records if "not instrumented" in record.getMessage()]
    assert "OTEL_PYTHON_GYM_TARGETS" in message and f"did you mean {nearest}?" in message, message
    assert "circular" not in message


def test_a_typo_in_an_imported_module_or_package_names_the_nearest_name(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    name = make_module(PIPELINE)
    importlib.import_module(name)
    environ = {"OTEL_PYTHON_GYM_TARGETS": f"{name}:Colector.dispatch=dispatch,{name[:-1]}:Collector.dispatch=dispatch"}
    with caplog.at_level(logging.ERROR, logger="gym_instrument"):
        assert GymConfig.resolve({}, environ=environ, check=True).targets == ()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and all("OTEL_PYTHON_GYM_TARGETS" in message for message in messages)
    assert "did you mean 'Collector'?" in messages[0]
    assert f"did you mean {name!r}?" in messages[1], messages[1]


def test_link_settings_from_the_environment_and_code(caplog: pytest.LogCaptureFixture, tmp_path: Any) -> None:
    environ = {"OTEL_PYTHON_GYM_LINK_DIR": str(tmp_path), "OTEL_PYTHON_GYM_LINK_FILES": "false"}
    config = GymConfig.resolve({}, environ)
    assert (config.link_dir, config.link_files) == (str(tmp_path), False)
    with caplog.at_level("ERROR"):
        assert GymConfig.resolve({}, {"OTEL_PYTHON_GYM_LINK_FILES": "maybe"}).link_files is True
    assert "OTEL_PYTHON_GYM_LINK_FILES" in caplog.text
    with pytest.raises(ValueError):
        GymConfig.resolve({"link_files": "maybe"})
    assert GymConfig.resolve({"link_dir": str(tmp_path)}, {"OTEL_PYTHON_GYM_LINK_DIR": "/elsewhere"}).link_dir == str(tmp_path)
