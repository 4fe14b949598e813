"""The instructions each judged `make bench` row's two sides execute per call, counted by cachegrind.

    make bench-instructions                                      # -> its section of benchmarks/RESULTS.md
    .venv/bin/python benchmarks/instructions.py --quick --no-output   # proves it runs

`make bench` times each row's two sides on this shared machine, whose speed moves from one moment to
the next: a row within a few percent of its goal lands on either side of it from one run to the next.
This counts what timing cannot settle: the instructions the CPU executes, which barely depend on the
machine's speed or on the other processes on it (runs agree within about 1% of a ratio: a thread
that wakes by the clock, or where memory lands, changes a few branches). Each side of a row runs
twice, in a process of its own under `valgrind --tool=cachegrind --cache-sim=no`
(PYTHONHASHSEED=0): its set-up and warm-up, then its calls; and the same without the calls. Its
count per call is the first count less the second, over the calls. The sides and their set-ups are
`benchmarks/cases.py`'s, as `make bench` runs them.

An instruction count is not a time: it leaves out what the instructions wait for (memory not in the
cache costs a lookup several times its instructions). The goals stay `make bench`'s, judged on time;
this section says whether the package's own work per call is within them.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cases  # benchmarks/ is the script's directory, first on sys.path (as for run.py)
import workload
from sections import INSTRUCTIONS, RESULTS, code_version

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


@dataclass(frozen=True)
class Row:
    """A judged `make bench` row: its two sides, what each is, its goal on time."""

    case: str
    measured: str
    sides: tuple[str, str]  # (the package's side, the baseline's): the side names a child runs
    names: tuple[str, str]
    goal: float


ROWS = (
    Row("A", "dispatch, SDK on: sync `send_row(row)`", ("a_sync", "a_sync_idiomatic"), ("Target", "inline, idiomatic"), 1.05),
    Row(
        "A",
        "dispatch, SDK on: async `ServerClient.post(..., '/run', json=row)`",
        ("a_async", "a_async_idiomatic"),
        ("Target", "inline, idiomatic"),
        1.05,
    ),
    Row(
        "A",
        "dispatch, SDK on: sync `send_row(row)`, default configuration",
        ("ad_sync", "ad_sync_keeping"),
        ("Target", "inline, idiomatic, keeping its span context"),
        1.05,
    ),
    Row(
        "A",
        "dispatch, SDK on: async `ServerClient.post(..., '/run', json=row)`, default configuration",
        ("ad_async", "ad_async_keeping"),
        ("Target", "inline, idiomatic, keeping its span context"),
        1.05,
    ),
    Row(
        "D",
        "health fan-out: a child span per verdict under its ended dispatch",
        ("d_auto", "d_hand"),
        ("Target", "bare spans, explicit parents"),
        1.10,
    ),
    Row(
        "after",
        "finding an ended dispatch and making it the parent",
        ("after_verify", "after_health"),
        ("a verify after it (`dispatch_parent`)", "a health pass (`take_many`, a parent each)"),
        1.05,
    ),
)

# Calls per side, and the calls made before counting (the first calls fill the caches of every layer).
CALLS = {"A": 20_000, "D": 20_000, "after": 20_000}
QUICK_CALLS = 300
WARM_UP = 2_000


# ---------------------------------------------------------------------------------------------
# A child: one side's set-up, warm-up and calls (run under valgrind)


def _a_side(side: str, calls: int, warm_up: int, counted: bool) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    default = side.startswith("ad_")
    provider, _ = cases.sdk()
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()]) if default else None
    targets = [cases.POST, cases.SEND_ROW, cases.HEALTH] if default else [cases.POST, cases.SEND_ROW]
    with cases.instrumented(targets, tracer_provider=provider, meter_provider=meter_provider):
        routes = {"/run": workload.echo_run}
        client, idiomatic = workload.ServerClient(routes), workload.IdiomaticServerClient(routes)
        calls_of: dict[str, Callable[[Any], Any]] = {
            "sync": workload.send_row,
            "sync_idiomatic": workload.idiomatic_send_row,
            "async": lambda row: cases.drive(client.post("simple_agent", "/run", json=row)),
            "async_idiomatic": lambda row: cases.drive(idiomatic.post("simple_agent", "/run", json=row)),
        }
        kind = side.split("_", 1)[1]
        call = calls_of[kind.replace("keeping", "idiomatic")]
        rows = workload.make_rows(calls, first_task=0)
        for row in workload.make_rows(warm_up, first_task=10**7):
            call(row)
        gc.collect()
        gc.disable()
        if not counted:
            return
        if kind.endswith("keeping"):
            cases.keeping(call, rows)
        else:
            for row in rows:
                call(row)


def _d_side(side: str, calls: int, warm_up: int, counted: bool) -> None:
    from gym_instrument import semconv

    provider, _ = cases.sdk()
    with cases.instrumented([cases.SEND_ROW, cases.HEALTH], tracer_provider=provider):
        parents: dict[str, Any] = {}
        # A warm-up pass, then the counted one. Each pass's dispatches end just before it, so the
        # counted pass builds its own lookup index, as make bench's D does inside its timing.
        for number, count in enumerate((warm_up, calls)):
            rows = workload.make_rows(count, first_task=number * 10**7)
            for row in rows:  # the package's side's dispatches, remembered for their verdicts
                workload.send_row(row)
            for row in rows:  # the hand-written side's dispatch spans
                attributes, rollout_id = workload.rollout_attributes(row)
                span = workload.Hand.tracer.start_span(semconv.SPAN_DISPATCH, attributes=attributes)
                span.end()
                parents[rollout_id] = span.get_span_context()
            path = f"run-{number}/rollouts.jsonl"
            workload.HEALTH_RESULTS[path] = workload.make_health_result(rows)
            if number == 0 or counted:
                if side == "d_auto":
                    workload.run_health_checks(path)
                else:
                    workload.hand_health_spans(cases.BARE_RUN_HEALTH_CHECKS(path), parents)
            if number == 0:
                gc.collect()
                gc.disable()


def _after_side(side: str, calls: int, warm_up: int, counted: bool) -> None:
    find = {"after_verify": cases.found_by_verifies, "after_health": cases.found_by_a_pass}[side]
    warm, names = cases.finding_memory(0, warm_up, 1_000_000), cases.finding_memory(10**7, calls, 1_000_000)
    find(*warm)
    gc.collect()
    gc.disable()
    if counted:
        find(*names)


SIDES: dict[str, Callable[[str, int, int, bool], None]] = {"a": _a_side, "ad": _a_side, "d": _d_side, "after": _after_side}


def run_side(side: str, calls: int, warm_up: int, counted: bool = True) -> None:
    """One side: its set-up and warm-up, then (``counted``) its calls."""
    SIDES[side.split("_", 1)[0]](side, calls, warm_up, counted)


# ---------------------------------------------------------------------------------------------
# The parent: counting each child


_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions_of(valgrind_output: str) -> int:
    """The instructions cachegrind counted (its summary's ``I refs``)."""
    found = _REFS.search(valgrind_output)
    if found is None:
        raise ValueError("no instruction count in valgrind's output:\n" + valgrind_output[-2000:])
    return int(found.group(1).replace(",", ""))


def per_call(counted: int, base: int, calls: int) -> float:
    """One side's instructions per call: its process's count less that of the same without the calls, over them."""
    return (counted - base) / calls


def count(side: str, calls: int, warm_up: int, counted: bool) -> int:
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        str(HERE / "instructions.py"),
        "--side",
        side,
        "--calls",
        str(calls),
        "--warm-up",
        str(warm_up),
        *(() if counted else ("--skip-calls",)),
    ]
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side}: exited {done.returncode}:\n{done.stderr[-2000:]}")
    return instructions_of(done.stderr)


def measure(rows: tuple[Row, ...], quick: bool) -> Iterator[tuple[Row, float, float]]:
    runs = [(side, counted) for row in rows for side in row.sides for counted in (True, False)]
    calls = {side: QUICK_CALLS if quick else CALLS[row.case] for row in rows for side in row.sides}
    warm_up = QUICK_CALLS if quick else WARM_UP
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count(run[0], calls[run[0]], warm_up, run[1]), runs), strict=True))
    for row in rows:
        package, baseline = (per_call(counts[side, True], counts[side, False], calls[side]) for side in row.sides)
        yield row, package, baseline


def report(measured: list[tuple[Row, float, float]], commit: str, quick: bool) -> str:
    lines = [
        "## Instructions per call (cachegrind)",
        "",
        "`make bench-instructions` (`benchmarks/instructions.py`; `make bench` keeps this section as it is): "
        "each judged row's two sides as `make bench` runs them, each in a process of its own under "
        "`valgrind --tool=cachegrind --cache-sim=no` (PYTHONHASHSEED=0), counted after a warm-up; a side's "
        "instructions per call are its process's count less that of the same process without the calls, "
        "over its calls. A count barely moves with the machine's speed (runs agree within about 1% of a "
        "ratio): one run is the figure. It is "
        "not a time (it leaves out what the instructions wait for, memory not in the cache above all), so the "
        "goals stay judged on `make bench`'s times; this says whether the package's own work is within them.",
        "",
        f"- Code: git {commit}; Python {sys.version.split()[0]}; calls per side: "
        + ", ".join(f"{case} {QUICK_CALLS if quick else calls:,}" for case, calls in CALLS.items()),
        "",
        "| case | measured | package side | baseline side | ratio | the row's goal (on time) | within it |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row, package, baseline in measured:
        ratio = package / baseline if baseline > 0 else float("nan")
        lines.append(
            f"| {row.case} | {row.measured} | {row.names[0]}: {package:,.0f} | {row.names[1]}: {baseline:,.0f} | "
            f"{ratio:.3f} | <= {row.goal:.2f} | {'yes' if ratio <= row.goal else '**NO**'} |"
        )
    if quick:
        lines += ["", "**Quick run (a few hundred calls): proves the benchmark runs, judges nothing.**"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a few hundred calls per side: proves it runs")
    parser.add_argument("--no-output", action="store_true", help="print the section, leave RESULTS.md alone")
    parser.add_argument("--side", help=argparse.SUPPRESS)  # (a child: run one side)
    parser.add_argument("--calls", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--warm-up", type=int, default=WARM_UP, help=argparse.SUPPRESS)
    parser.add_argument("--skip-calls", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.side:
        run_side(arguments.side, arguments.calls, arguments.warm_up, not arguments.skip_calls)
        return 0
    if shutil.which("valgrind") is None:
        print("benchmarks/instructions.py: valgrind is not installed (make bench-instructions installs it)", file=sys.stderr)
        return 2
    try:
        measured = list(measure(ROWS, arguments.quick))
    except RuntimeError as error:
        print(f"benchmarks/instructions.py: a side failed: {error}", file=sys.stderr)
        return 1
    text = report(measured, code_version(REPO), arguments.quick)
    print(text)
    if not arguments.no_output:
        INSTRUCTIONS.write(REPO / RESULTS, text)
        print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
