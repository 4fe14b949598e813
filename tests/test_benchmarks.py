"""The benchmarks still run: ``benchmarks/run.py --quick`` once, with tiny sizes, in its own process.

No time limit and no figure is asserted here (timings belong to ``make bench``); this proves
every case runs end to end, its sameness checks pass, and the table has a line for each case.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
CASES = ("A", "B", "C", "D", "E", "F", "bind", "parts", "links", "hops", "after")


def test_benchmarks_run_and_write_a_table_with_every_case(tmp_path: Path) -> None:
    output = tmp_path / "RESULTS.md"
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr

    text = output.read_text()
    table = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| case", "| ---"))]
    cases_in_table = {line.split("|")[1].strip() for line in table}
    assert cases_in_table == set(CASES)
    for line in table:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == 10
        assert all(re.fullmatch(r"[+-]?[\d,]+(\.\d+)?", cell) for cell in cells[5:8]), line  # min, median, max
    assert "Python:" in text and "opentelemetry-sdk" in text and "wrapt" in text
    # A's goal is judged against the idiomatic twin; in the default configuration (every dispatch
    # remembered) against the idiomatic twin that keeps its span contexts too.
    judged_a = [line for line in table if line.startswith("| A |") and "| <= 1.05 |" in line]
    assert len(judged_a) == 4, judged_a
    for line in judged_a:
        keeps = "keeping its span context for the health pass" in line
        assert keeps == ("default configuration" in line), line
    # As a user names a function of their own; a result that carries token totals shows their price.
    assert sum("(`workload:send_row=dispatch@nemo_gym`)" in line for line in judged_a) == 2
    totals = [line for line in table if line.startswith("| A |") and "its result carrying the rollout's token totals" in line]
    assert len(totals) == 2 and all("| (the totals' price, not judged) |" in line for line in totals), totals
    assert text in completed.stdout  # printed as well as written


def _run_module() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("bench_run", BENCHMARKS / "run.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_an_unmet_async_goal_is_set_beside_the_parts_no_wrapper_can_do_without() -> None:
    run = _run_module()
    row = run.Row

    def part(measured: str, median: float) -> Any:
        return row("parts", measured, f"{median:.2f} us", "whole", "us/call", [median], "", None)

    rows = [
        row(
            "A",
            "dispatch, SDK on: async `ServerClient.post(..., '/run', json=row)`",
            "Target: 23.00 us",
            "inline, idiomatic (`start_as_current_span`): 22.00 us",
            "ratio",
            [23.0 / 22.0],
            "<= 1.05",
            True,
        ),
        row(
            "A",
            "dispatch, SDK on: async `ServerClient.post(..., '/run', json=row)`, default configuration (a health target armed)",
            "Target: 24.00 us",
            "inline, idiomatic (`start_as_current_span`): 22.00 us",
            "ratio",
            [24.0 / 22.0],
            "<= 1.05",
            False,
        ),
        part("wrapt `FunctionWrapper`, pass-through wrapper: `send_row(row)`", 0.49),
        part("wrapt `FunctionWrapper`, pass-through wrapper: async `ServerClient.post(..., json=row)`", 0.58),
        part("a coroutine around the call's (an `async def` awaiting it): async `ServerClient.post`", 0.25),
        part("remembering one ended dispatch for its verdict (`DispatchLinks.remember`, fresh keys)", 0.43),
        part("remembering inside a run: traced `send_row(row)` with the dispatch memory on", 0.40),
        part("remembering inside a run: traced async `ServerClient.post(..., '/run', json=row)` with it on", 0.78),
    ]
    text = run.unmet(rows)
    # The async row's parts: wrapt's async pass-through, the coroutine around the call, remembering alone.
    assert "wrapt's dispatch through a wrapper that does nothing (0.58 us)" in text
    assert "the coroutine the wrapper runs around the call's, to see it end (0.25 us)" in text
    assert "(0.43 us measured alone; 0.78 us inside a run of this dispatch)" in text
    assert "this dispatch takes 1.00 us more in the default configuration than without a health target armed" in text
    # 0.58 + 0.25 + 0.43 against 5% of 22.00 us
    assert "Those parts alone take 1.26 us, more than the 1.10 us allowed" in text


def test_every_side_the_instruction_count_runs_runs_as_a_process_of_its_own() -> None:
    """``benchmarks/instructions.py`` counts each side of a judged row in a child process (under
    valgrind in ``make bench-instructions``): every side runs to its end, with its calls and without."""
    spec = importlib.util.spec_from_file_location("instructions_bench", BENCHMARKS / "instructions.py")
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(BENCHMARKS))
    instructions = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = instructions  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(instructions)
    finally:
        sys.path.remove(str(BENCHMARKS))
        del sys.modules[spec.name]
    sides = sorted({side for row in instructions.ROWS for side in row.sides})
    assert len(sides) == 2 * len(instructions.ROWS)
    for side, skip in ((side, skip) for side in sides for skip in ((), ("--skip-calls",))):
        completed = subprocess.run(
            [sys.executable, str(BENCHMARKS / "instructions.py"), "--side", side, "--calls", "40", "--warm-up", "10", *skip],
            capture_output=True,
            text=True,
            check=False,
        )
        assert completed.returncode == 0, (side, completed.stderr[-2000:])
    summary = "==1== \n==1== I   refs:      1,234,567,890\n"
    assert instructions.instructions_of(summary) == 1_234_567_890
    assert instructions.per_call(1_000_500, 1_000_000, 50) == 10.0
