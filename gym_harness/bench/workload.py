"""What a whole run runs: the release, the mcqa workload, the configurations and the order of a round.

The configurations differ only in how their processes start (the launcher or not) and in their
environment (:func:`configuration_env`); everything else is the same for all of them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_harness.bench.hand import ACTIVE_VAR as HAND_VAR
from gym_harness.releases import RELEASES

RELEASE = next(release for release in RELEASES if release.version == "0.7.0")

# none: plain `gym`; contrib: the launcher with this package disabled; full: the launcher with it;
# lean: full with the settings a NeMo Gym user should run with (LEAN_SETTINGS, RAY_WITHOUT_LAUNCHER);
# gym: the launcher with this package alone (contrib's aiohttp-client and FastAPI instrumentations
# disabled, so neither is ever imported: the package's own propagation carries the context), Ray's
# cluster started as lean's; hand: gym's launcher and settings with this package disabled too, and the
# same spans written by hand into NeMo Gym (gym_harness/bench/hand/patch.py, armed by HAND_VAR).
CONFIGURATIONS = ("none", "contrib", "full", "lean", "hand", "gym")
# What a run collects unless `--configurations` names others (gym is named: `--configurations none,gym`,
# and hand: `--configurations none,hand,gym`).
DEFAULT_CONFIGURATIONS = ("none", "contrib", "full", "lean")
# The ratios the report gives, numerator / denominator, each within a round; a configuration's row in
# the table shows the first that has it as numerator, the others follow the table.
RATIOS = (
    ("contrib", "none"),
    ("full", "contrib"),
    ("lean", "contrib"),
    ("lean", "none"),
    ("hand", "none"),
    ("gym", "hand"),
    ("gym", "none"),
)
# gym's variables on top of full's environment: the contrib HTTP instrumentations are not loaded, and
# FastAPI's own telemetry (0.165 and later: spans, metrics, logs per request) is off for the requests
# the package's receive targets handle, as docs/nemo-gym.md tells the user who wants the cheapest run.
GYM_SETTINGS = (
    ("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "aiohttp-client,fastapi"),
    ("OTEL_PYTHON_GYM_SERVER_TELEMETRY", "false"),
)
# hand's variables on top of full's environment: gym's, this package disabled as well (never imported), and
# the hand-written spans armed.
HAND_SETTINGS = (
    ("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "aiohttp-client,fastapi,gym"),
    ("OTEL_PYTHON_GYM_SERVER_TELEMETRY", "false"),
    (HAND_VAR, "1"),
)
# The configurations whose Ray cluster is started without the launcher that starts their other
# processes, in a plain environment (no OTEL_* variable; none has neither anywhere), as a user would
# run `ray start --head` in a shell of its own and give its address to `gym env start` and `gym eval
# run` as `+ray_head_node_address`. Ray's processes then carry no OpenTelemetry at all: no
# spans of its dashboard's `/api/healthz` polls, no `ray_*` metrics through the launcher's meter
# provider, no instrumentation loaded into its dashboard, agent and workers. The package's spans are
# all made in the collector and the Gym servers, which `gym env start` starts itself, under the launcher.
RAY_WITHOUT_LAUNCHER = frozenset({"lean", "hand", "gym"})
# Variables only the launched processes of a configuration get: the receiver and the scripted model (which
# stand for the tracing backend and the model, outside the pipeline) and a Ray cluster started without the
# launcher run without them.
LAUNCHED_ONLY = ("OTEL_", "GYM_BENCH_PROFILE", HAND_VAR)
# lean's variables on top of full's environment. FastAPI's `http send` / `http receive` spans (30 of
# contrib's 43 spans per rollout) cannot be left out by a variable: opentelemetry-instrumentation-
# fastapi 0.66b1 takes `exclude_spans` only as an argument of `instrument_app`/`instrument()`, which
# the launcher calls without it (contrib#3992 proposes `OTEL_PYTHON_FASTAPI_EXCLUDE_SPANS`). When a
# release reads such a variable, it goes here.
LEAN_SETTINGS: tuple[tuple[str, str], ...] = ()

# What the mcqa collection needs: its resources server, agent and environment server, and the model server.
GYM_CONFIGS = ("resources_servers/mcqa/configs/mcqa.yaml", "responses_api_models/openai_model/configs/openai_model.yaml")

SERVER_DIRS = (
    "resources_servers/mcqa",
    "responses_api_agents/simple_agent",
    "responses_api_models/openai_model",
    "environment_servers/legacy_agent",
)

EXPECTED_SERVERS = 4

# After the collector exits, before the CPU is read: each server's batch span processor sends its last
# (short of a full batch) spans only after its schedule delay, 5 s by default; the same wait for every
# configuration, so that export and its receipt are inside the window.
SETTLE_SECONDS = 5.5

# While one configuration collects, the others' processes are stopped (SIGSTOP): their idle Ray
# clusters and servers would otherwise take CPU from it at random. Resumed, a configuration gets
# this long before its CPU is first read, for the timers that came due while it was stopped.
THAW_SECONDS = 2.0

SAMPLER_MODULE = "gym_bench_drop_ours"  # benchmarks/drop_ours_sampler.py in the venv, for --drop-ours

SAMPLER_DIST = f"{SAMPLER_MODULE}-0.dist-info"


@dataclass(frozen=True)
class Variant:
    """A diagnostic run in which full's processes get these variables (issue 14's point 3: a part of the
    cost measured apart); its report goes into a section of its own, the default runs' stay as they are."""

    flag: str  # on the command line, --<flag>
    env: tuple[tuple[str, str], ...]
    what: str  # added to full's "what runs" cell
    heading: str
    section: str  # the name of its RESULTS.md section (benchmarks/sections.py)
    sampler: bool = False  # needs drop_ours_sampler.py's entry point in the venv


VARIANTS = {
    variant.flag: variant
    for variant in (
        Variant(
            "no-baggage",
            (("OTEL_PYTHON_GYM_BAGGAGE", "false"),),
            "`OTEL_PYTHON_GYM_BAGGAGE=false` (the rollout id kept in-process)",
            "Baggage kept in-process: full with `OTEL_PYTHON_GYM_BAGGAGE=false`",
            "whole_run_no_baggage",
        ),
        Variant(
            "drop-ours",
            (("OTEL_TRACES_SAMPLER", SAMPLER_MODULE),),
            "the SDK dropping the package's spans (`benchmarks/drop_ours_sampler.py`)",
            "The package's spans dropped by the SDK: its own work apart from OpenTelemetry's",
            "whole_run_drop_ours",
            sampler=True,
        ),
    )
}


@dataclass(frozen=True)
class Workload:
    tasks: int
    repeats: int
    concurrency: int
    rounds: int
    warmup: bool = True
    blocks: int = 1  # the rounds in this many blocks, each with every configuration started afresh
    together: bool = False  # every configuration of a round collects at the same moment, not one after another
    variant: str | None = None  # a key of VARIANTS: full's processes get its variables
    # Rollouts per collection, each round collecting every configuration at each (--sizes): what a rollout
    # adds, apart from what a collection costs whatever its size. Empty: one size, tasks x repeats.
    sizes: tuple[int, ...] = ()

    @property
    def rollouts(self) -> int:
        return self.tasks * self.repeats


# 16 rounds in 4 blocks: each block one turn of the four configurations' balanced orders (round_orders).
FULL = Workload(tasks=100, repeats=4, concurrency=64, rounds=16, blocks=4)
QUICK = Workload(tasks=4, repeats=2, concurrency=4, rounds=1, warmup=False)


def configuration_env(name: str, base: dict[str, str], variant: str | None = None) -> dict[str, str]:
    """The environment of a configuration's processes (Ray's too, but for RAY_WITHOUT_LAUNCHER); a variant's
    variables go to full's alone, lean has full's and LEAN_SETTINGS."""
    env = dict(base)
    # The SDK's own export settings (the e2e shortens them to see spans quickly; a user has these).
    for variable in ("OTEL_BSP_SCHEDULE_DELAY", "OTEL_METRIC_EXPORT_INTERVAL"):
        env.pop(variable, None)
    if name == "none":
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    elif name == "contrib":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "gym"
    elif name == "lean":
        env.update(LEAN_SETTINGS)
    elif name == "gym":
        env.update(GYM_SETTINGS)
    elif name == "hand":
        env.update(HAND_SETTINGS)
    elif variant is not None:
        env.update(VARIANTS[variant].env)
    return env


def round_orders(names: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """Each round's order, the orders taken in turn. Over each full turn every configuration runs in every
    position, and runs directly after each other one, equally often (a rotation runs `full` right after
    `contrib` in two rounds of three and never the other way round). An odd number of configurations takes
    every order (3: six rounds a turn); an even number a balanced Latin square (Williams' design: 4 take
    four rounds a turn where every order would take 24)."""
    orders = list(itertools.permutations(names)) if len(names) % 2 else _williams(names)
    return [orders[number % len(orders)] for number in range(rounds)]


def _williams(names: Sequence[str]) -> list[tuple[str, ...]]:
    """Williams' balanced Latin square for an even number of names: the first row 0, 1, n-1, 2, n-2, ...,
    each next row every index plus one (mod n); each name is once in each position and once right after
    each other name."""
    count = len(names)
    first = [0]
    for step in range(1, count):
        first.append((step + 1) // 2 if step % 2 else count - step // 2)
    return [tuple(names[(index + shift) % count] for index in first) for shift in range(count)]


def blocks_of(rounds: int, blocks: int) -> list[list[int]]:
    """The round numbers (from 1) of each block, in order, as even as they divide."""
    count = max(1, min(blocks, rounds))
    return [[n for n in range(1, rounds + 1) if (n - 1) * count // rounds == b] for b in range(count)]


LETTERS = "ABCD"


def write_tasks(path: Path, tasks: int) -> Path:
    """`tasks` distinct mcqa rows (flat, each with its `agent_ref` and a string `task_id`)."""
    rows = []
    for index in range(tasks):
        options = [{letter: f"option {letter.lower()} of question {index}"} for letter in LETTERS]
        question = f"Synthetic question {index}: which option is the one marked correct for this question?"
        listing = "\n".join(f"{letter}: {text}" for option in options for letter, text in option.items())
        prompt = (
            "You should output your final response letter inside \\boxed{} and nothing else You can first think "
            f"step-by-step. {question}\n{listing}"
        )
        rows.append(
            {
                "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
                "options": options,
                "expected_answer": LETTERS[index % len(LETTERS)],
                "grading_mode": "strict_single_letter_boxed",
                "uuid": f"bench-{index:04d}",
                "agent_ref": {"name": "mcqa_simple_agent"},
                "task_id": f"bench-task-{index}",
            }
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def rollout_outcomes(rows: list[dict[str, Any]]) -> dict[int, list[float | None]]:
    """Per task index, the sorted rewards of its rollouts: what must be the same in every configuration."""
    by_task: dict[int, list[float | None]] = {}
    for row in rows:
        by_task.setdefault(int(row["_ng_task_index"]), []).append(row.get("reward"))
    return {task: sorted(rewards, key=lambda r: (r is None, r)) for task, rewards in sorted(by_task.items())}


def compare_outcomes(outcomes: dict[str, dict[int, list[float | None]]]) -> list[str]:
    """What differs between the configurations' outcomes of one round (empty when they agree)."""
    problems = []
    names = list(outcomes)
    reference = outcomes[names[0]]
    for name in names[1:]:
        other = outcomes[name]
        if set(other) != set(reference):
            problems.append(f"{name} wrote rows for tasks {sorted(set(other) ^ set(reference))} that {names[0]} did not")
        for task in sorted(set(other) & set(reference)):
            if other[task] != reference[task]:
                problems.append(f"task {task}: {names[0]} rewards {reference[task]}, {name} {other[task]}")
    return problems
