"""launch_cost (and gym_harness/bench/launch.py): what each way of starting gets in its environment, and how a round is read."""

from __future__ import annotations

from benchmarks import launch_cost
from gym_harness.bench import launch
from gym_harness.bench.workload import GYM_SETTINGS


def test_each_way_starts_with_its_own_environment() -> None:
    envs = launch.environments(4318)
    assert not [name for name in envs["plain"] if name.startswith("OTEL_")]
    for name, value in GYM_SETTINGS:
        assert envs["gym"][name] == value
    assert envs["gym"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    disabled = envs["launcher"]["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"].split(",")
    assert "gym" in disabled and "gym" not in envs["gym"]["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"].split(",")
    # The launcher's way differs from gym's in that one variable alone.
    assert {k: v for k, v in envs["launcher"].items() if envs["gym"].get(k) != v} == {
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": envs["launcher"]["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"]
    }


def test_the_added_cost_is_the_median_of_each_rounds_own_difference() -> None:
    # The launcher's rounds: 90, 190, 290 ms over plain (median 190); the package's: 30, 20, 90 (median 30),
    # where the difference of the medians would say 20.
    cpu = {"plain": [10.0, 10.0, 10.0], "launcher": [100.0, 200.0, 300.0], "gym": [130.0, 220.0, 390.0]}
    text = launch_cost.report(cpu, "abc123")
    assert "OpenTelemetry's launcher adds 190 ms" in text
    assert "this package on it adds 30 ms" in text
    assert "together 210 ms" in text
    assert "is 0.53 ms of CPU per rollout" in text  # 210 ms over 400 rollouts
