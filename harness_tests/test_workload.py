"""The whole run's workload and configurations (``gym_harness.bench.workload``): the tasks it writes (every
one answerable by the scripted model), the sameness check of the configurations' outcomes, the order of the
rounds, and each configuration's environment."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

from gym_harness import model_server, processes
from gym_harness.bench import hand, workload

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_outcomes_must_be_the_same_rows_and_rewards_per_task() -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": float((t + r) % 2)} for t in range(3) for r in range(2)]
    same_rewards_other_order = [{**row, "reward": 1.0 - row["reward"]} for row in rows]
    outcome = workload.rollout_outcomes(rows)
    assert outcome == {0: [0.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 1.0]}
    assert workload.compare_outcomes({"none": outcome, "full": workload.rollout_outcomes(same_rewards_other_order)}) == []

    wrong = [{**row, "reward": 0.0} if row["_ng_task_index"] == 1 else row for row in rows]
    missing = [row for row in rows if row["_ng_task_index"] != 2]
    problems = workload.compare_outcomes(
        {"none": outcome, "contrib": workload.rollout_outcomes(wrong), "full": workload.rollout_outcomes(missing)}
    )
    assert any("task 1" in problem and "contrib" in problem for problem in problems)
    assert any("full wrote rows for tasks [2]" in problem for problem in problems)


def test_every_written_task_is_answered_by_the_scripted_model(tmp_path: Path) -> None:
    path = workload.write_tasks(tmp_path / "tasks.jsonl", 12)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 12 and len({row["task_id"] for row in rows}) == 12
    assert all(row["agent_ref"] == {"name": "mcqa_simple_agent"} for row in rows)
    key = model_server.load_answer_key(path)
    assert len(key) == 12
    for row in rows:
        prompt = model_server.last_user_text(row["responses_create_params"]["input"])
        assert key[prompt]["expected"] == row["expected_answer"]
        assert row["expected_answer"] in key[prompt]["letters"]


def test_every_order_in_turn_balances_positions_and_who_runs_right_after_whom() -> None:
    names = ("none", "contrib", "full")
    orders = workload.round_orders(names, 18)
    assert len(orders) == 18 and all(sorted(order) == sorted(names) for order in orders)
    for turn in range(3):  # each turn of six rounds on its own
        six = orders[turn * 6 : turn * 6 + 6]
        assert len(set(six)) == 6
        positions = Counter((order.index(name), name) for order in six for name in names)
        assert set(positions.values()) == {2}  # every configuration in every position twice
        adjacent = Counter(pair for order in six for pair in itertools.pairwise(order))
        assert adjacent[("contrib", "full")] == adjacent[("full", "contrib")] == 2
        assert set(adjacent.values()) == {2}
    # Two configurations alternate.
    assert workload.round_orders(("contrib", "full"), 4) == [("contrib", "full"), ("full", "contrib")] * 2


def test_four_configurations_take_a_balanced_turn_of_four_rounds() -> None:
    names = workload.DEFAULT_CONFIGURATIONS
    orders = workload.round_orders(names, workload.FULL.rounds)
    assert len(names) == 4 and len(orders) == 16
    for block in workload.blocks_of(workload.FULL.rounds, workload.FULL.blocks):  # each block one whole turn
        turn = [orders[number - 1] for number in block]
        assert len(turn) == 4 and all(sorted(order) == sorted(names) for order in turn)
        positions = Counter((order.index(name), name) for order in turn for name in names)
        assert set(positions.values()) == {1} and len(positions) == 16  # every configuration in every position once
        adjacent = Counter(pair for order in turn for pair in itertools.pairwise(order))
        assert set(adjacent.values()) == {1} and len(adjacent) == 12  # each one right after each other one once


def test_blocks_split_the_rounds_evenly_and_in_order() -> None:
    assert workload.blocks_of(18, 3) == [list(range(1, 7)), list(range(7, 13)), list(range(13, 19))]
    assert workload.blocks_of(7, 3) == [[1, 2, 3], [4, 5], [6, 7]]
    assert workload.blocks_of(1, 3) == [[1]]  # never an empty block
    assert workload.blocks_of(5, 1) == [[1, 2, 3, 4, 5]]


def test_a_variant_run_sets_its_variables_in_full_alone() -> None:
    from gym_instrument.config.settings import GymConfig

    base = {"OTEL_SERVICE_NAME": "x", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    read = {
        (name, variant): GymConfig.resolve({}, environ=workload.configuration_env(name, base, variant))
        for name in ("contrib", "full")
        for variant in (None, "no-baggage")
    }
    assert read["full", None].baggage and read["contrib", "no-baggage"].baggage and read["contrib", None].baggage
    assert not read["full", "no-baggage"].baggage  # what the package itself reads from full's environment
    assert "OTEL_PYTHON_GYM_BAGGAGE" not in workload.configuration_env("none", base, "no-baggage")
    assert workload.configuration_env("full", base, "drop-ours")["OTEL_TRACES_SAMPLER"] == workload.SAMPLER_MODULE
    assert "OTEL_TRACES_SAMPLER" not in workload.configuration_env("contrib", base, "drop-ours")


# What the run's processes get from e2e's environment (gym_harness.environment.base_env), in short.
BASE = {
    "PATH": "/v/bin:/bin",
    processes.RUN_MARKER_VAR: "m",
    "OTEL_SERVICE_NAME": "nemo-gym-e2e",
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS": "/api/healthz",
}


def test_lean_runs_full_s_environment_with_exactly_the_lean_settings() -> None:
    from gym_instrument.config.settings import GymConfig

    full = workload.configuration_env("full", BASE)
    lean = workload.configuration_env("lean", BASE)
    assert lean == {**full, **dict(workload.LEAN_SETTINGS)}  # nothing else added, nothing taken away
    # The package reads the same settings in lean as in full: its spans are the same.
    assert GymConfig.resolve({}, environ=lean) == GymConfig.resolve({}, environ=full)
    assert "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS" not in lean
    assert workload.configuration_env("lean", BASE, "no-baggage") == lean  # a variant is full's alone


def test_gym_runs_full_s_environment_with_contrib_s_http_instrumentations_left_unloaded() -> None:
    from gym_instrument.config.settings import GymConfig

    full = workload.configuration_env("full", BASE)
    gym = workload.configuration_env("gym", BASE)
    assert gym == {
        **full,
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "aiohttp-client,fastapi",
        "OTEL_PYTHON_GYM_SERVER_TELEMETRY": "false",
    }
    # The package's settings: full's, but FastAPI's own telemetry off (the cheapest run docs/nemo-gym.md describes).
    assert GymConfig.resolve({}, environ=gym) == GymConfig.resolve({"server_telemetry": False}, environ=full)
    assert "gym" in workload.RAY_WITHOUT_LAUNCHER and "gym" not in workload.DEFAULT_CONFIGURATIONS
    assert ("gym", "none") in workload.RATIOS


def test_hand_runs_gym_s_environment_with_the_package_off_and_the_hand_written_spans_armed() -> None:
    gym = workload.configuration_env("gym", BASE)
    hand_env = workload.configuration_env("hand", BASE)
    # The same launcher settings, exporters and propagators as gym's: only the package disabled too, and the patch armed.
    assert hand_env == {
        **gym,
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "aiohttp-client,fastapi,gym",
        hand.ACTIVE_VAR: "1",
    }
    for name in ("none", "contrib", "full", "lean", "gym"):
        assert hand.ACTIVE_VAR not in workload.configuration_env(name, {**BASE, "OTHER": "x"})
    assert "hand" in workload.RAY_WITHOUT_LAUNCHER and "hand" not in workload.DEFAULT_CONFIGURATIONS
    # A run of none, hand and gym reads gym against hand first, then hand against none.
    assert workload.RATIOS.index(("gym", "hand")) < workload.RATIOS.index(("gym", "none"))
    assert ("hand", "none") in workload.RATIOS
