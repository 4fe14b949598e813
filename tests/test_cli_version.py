"""``gym-instrument --version``, the version in ``--help``, and ``--html DIR``: what the real command prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gym_instrument import __version__

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
E070 = Path(__file__).resolve().parent / "data" / "e2e_runs" / "nemo-gym-0.7.0" / "live_spans.otlp.jsonl"


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GYM_INSTRUMENT), *arguments], capture_output=True, text=True)


def test_version_and_help_name_the_installed_version() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout == f"gym-instrument {__version__}\n" and version.stderr == ""
    helped = run("--help")
    assert helped.returncode == 0 and f"(gym-instrument {__version__})" in helped.stdout
    assert "4 (report, compare) a run's infrastructure failures over --max-infra-failures" in " ".join(helped.stdout.split())


def test_html_given_a_folder_writes_report_html_in_it(tmp_path: Path) -> None:
    folder = tmp_path / "pages"
    folder.mkdir()
    process = run("report", str(E070), "--html", str(folder))
    assert process.returncode == 0, process.stderr
    assert (folder / "report.html").is_file() and f"report: {folder / 'report.html'}" in process.stdout
    fresh = run("report", str(E070), "--html", f"{tmp_path}/new/")  # a folder not made yet, named with a final /
    assert fresh.returncode == 0 and (tmp_path / "new" / "report.html").is_file()
