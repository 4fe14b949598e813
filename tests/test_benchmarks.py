"""The benchmarks still run: ``benchmarks/run.py --quick`` once, with tiny sizes, in its own process.

No time limit and no figure is asserted here (timings belong to ``make bench``); this proves
every case runs end to end, its sameness checks pass, and the table has a line for each case.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
CASES = ("A", "B", "C", "D", "E", "F", "bind", "parts")


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
    assert text in completed.stdout  # printed as well as written
