"""Sections of benchmarks/RESULTS.md that a benchmark other than ``make bench`` writes, kept across its runs.

``benchmarks/run.py`` rewrites RESULTS.md whole; each section below is written by its own script between
two markers, and run.py carries it over as it was (``keep``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

RESULTS = "benchmarks/RESULTS.md"  # in the repository


@dataclass(frozen=True)
class Section:
    """The part of a RESULTS.md text between this script's two markers."""

    name: str
    writer: str  # the command that writes it

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}: written by {self.writer} -->"

    @property
    def end(self) -> str:
        return f"<!-- /{self.name} -->"

    def of(self, text: str) -> str | None:
        """This section of ``text``, markers included; None when it has none."""
        if self.begin not in text or self.end not in text:
            return None
        return text[text.index(self.begin) : text.index(self.end) + len(self.end)]

    def write(self, path: Path, body: str, before: Section | None = None) -> None:
        """Put ``body`` between the markers in the file at ``path``, replacing what was there; a new section goes
        just before the ``before`` section when the file has it, else at the end."""
        section = f"{self.begin}\n{body.rstrip()}\n{self.end}"
        text = path.read_text() if path.exists() else ""
        old = self.of(text)
        if old:
            text = text.replace(old, section)
        elif before is not None and before.begin in text:
            text = text.replace(before.begin, section + "\n\n" + before.begin, 1)
        else:
            text = text.rstrip() + "\n\n" + section + "\n"
        path.write_text(text)


REPORT_MEMORY = Section("report_memory", "benchmarks/report_memory.py")
WHOLE_RUN = Section("whole_run", "benchmarks/whole_run.py")
WHOLE_RUN_TOGETHER = Section("whole_run_together", "benchmarks/whole_run.py --together")
WHOLE_RUN_PROFILE = Section("whole_run_profile", "benchmarks/whole_run.py --profile")
WHOLE_RUN_NO_BAGGAGE = Section("whole_run_no_baggage", "benchmarks/whole_run.py --no-baggage")
WHOLE_RUN_DROP_OURS = Section("whole_run_drop_ours", "benchmarks/whole_run.py --drop-ours")
WHOLE_RUN_GYM = Section("whole_run_gym", "benchmarks/whole_run.py --configurations none,gym")
WHOLE_RUN_HAND = Section("whole_run_hand", "benchmarks/whole_run.py --configurations none,hand,gym")
WHOLE_RUN_SIZES = Section("whole_run_sizes", "benchmarks/whole_run.py --sizes")
BOUNDED_READS = Section("bounded_reads", "benchmarks/bounded_reads.py")
LAUNCH_COST = Section("launch_cost", "benchmarks/launch_cost.py")
INSTRUCTIONS = Section("instructions", "benchmarks/instructions.py")
KEPT = (
    INSTRUCTIONS,
    REPORT_MEMORY,
    BOUNDED_READS,
    WHOLE_RUN,
    WHOLE_RUN_GYM,
    WHOLE_RUN_HAND,
    WHOLE_RUN_SIZES,
    LAUNCH_COST,
    WHOLE_RUN_TOGETHER,
    WHOLE_RUN_NO_BAGGAGE,
    WHOLE_RUN_DROP_OURS,
    WHOLE_RUN_PROFILE,
)


def keep(path: Path, text: str) -> str:
    """``text`` (a new RESULTS.md) with every section of ``KEPT`` that the file at ``path`` has carried over."""
    old_text = path.read_text() if path.exists() else ""
    for section in KEPT:
        old = section.of(old_text)
        if old is not None and section.begin not in text:
            text = text.rstrip() + "\n\n" + old + "\n"
    return text


def code_version(repo: Path) -> str:
    """The code a benchmark measured: ``git describe`` of ``repo``, ``-dirty`` when a tracked file other than
    RESULTS.md differs from it (a run writes RESULTS.md; the previous run's figures there change no code)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "describe", "--always"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){RESULTS}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if changed else "")
