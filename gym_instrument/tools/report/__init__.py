"""``gym-instrument report``: what a run's spans say, as a terminal summary, JSON and one HTML page;
``gym-instrument compare``: two runs side by side.

Usage::

    gym-instrument report spans.jsonl [more.jsonl | a-directory ...] --html report.html
    gym-instrument report spans/ --format json > figures.json
    gym-instrument report spans.jsonl --trace-url phoenix      # rollout rows link to Phoenix
    gym-instrument compare last-checkpoint/ this-checkpoint/ --html compare.html
    python -m gym_instrument.tools.report spans.jsonl          # the same as report

From Python::

    from gym_instrument.tools.report import build_report, write_html

    figures = build_report(["spans.jsonl"], trace_url="mlflow")
    write_html(figures, "report.html")

The input is OTLP/JSON lines as OpenTelemetry's file exporter and the Collector's file exporter
write them (see :mod:`gym_instrument.tools.report.otlp`); every span is read first into compact
per-rollout records, which are then joined and each rollout decided once (see
:mod:`gym_instrument.tools.report.figures` and :mod:`gym_instrument.tools.report.rollouts`). The base install is
enough for all of it, the HTML page included (its charts are inline SVG); the ``report`` extra
adds a progress bar for long reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym_instrument.tools.report.figures import INFRA_LIMIT, RunFigures
from gym_instrument.tools.report.links import trace_url_template
from gym_instrument.tools.report.otlp import ReadStats, read_spans, span_files

__all__ = ["NoSpansError", "build_report", "write_compare_html", "write_html"]

RUN_FILES = ("rollouts.jsonl", "rollout_verdicts.jsonl")


class NoSpansError(ValueError):
    """The paths hold none of the package's spans: nothing to report."""


def build_report(
    paths: Sequence[str | os.PathLike[str]],
    trace_url: str | None = None,
    success_threshold: float = 1.0,
    progress: bool | None = None,
    max_infra_failures: float = INFRA_LIMIT,
) -> dict[str, Any]:
    """The figures of the run whose spans are in ``paths`` (files, or directories of them).

    Raises :class:`FileNotFoundError` for a path that does not exist and :class:`NoSpansError` when
    the paths hold none of the package's spans (an empty file, a folder of other files, a binary file).
    ``max_infra_failures``: the share of infrastructure failures over which ``figures["infra_failures"]``
    says ``over_limit`` (:class:`~gym_instrument.tools.report.figures.InfraFailures`).
    """
    template = trace_url_template(trace_url)
    stats = ReadStats()
    skipped: list[Path] = []
    files = span_files(paths, skipped)
    run = RunFigures(success_threshold=success_threshold, trace_url=template, max_infra_failures=max_infra_failures)
    run.add_all(read_spans(files, stats, progress=progress))
    if stats.spans == 0:
        raise NoSpansError(_no_spans(paths, files, skipped, stats))
    return run.figures(stats)


def _no_spans(paths: Sequence[str | os.PathLike[str]], files: list[Path], skipped: list[Path], stats: ReadStats) -> str:
    where = ", ".join(str(path) for path in paths)
    if not files:
        message = f"no OTLP/JSON span files in {where}"
        if skipped:
            message += f" ({len(skipped)} other .json/.jsonl files left out)"
    else:
        read = f"{stats.lines} lines of {len(files)} file(s) read"
        if stats.bad_lines:
            read += f", {stats.bad_lines} not OTLP/JSON"
        if stats.other_spans:
            read += f", {stats.other_spans} spans of other instrumentations"
        message = f"no spans of gym_instrument in {where} ({read})"
    for path in map(Path, paths):
        if path.is_dir() and any((path / name).is_file() for name in RUN_FILES):
            output = path / "spans.otlp.jsonl"
            message += f"; {path} looks like a NeMo Gym run: make its spans with `gym-instrument replay {path} --output {output}`"
            break
    return message


def _write(text: str, path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def write_html(figures: dict[str, Any], path: str | os.PathLike[str], title: str = "gym-instrument report") -> Path:
    """Write the self-contained HTML page of ``figures`` to ``path``."""
    from gym_instrument.tools.report.page import render

    return _write(render(figures, title), path)


def write_compare_html(comparison: dict[str, Any], path: str | os.PathLike[str], title: str = "gym-instrument compare") -> Path:
    """Write the page of a comparison (:func:`gym_instrument.tools.report.compare.compare`) to ``path``."""
    from gym_instrument.tools.report.page import render_compare

    return _write(render_compare(comparison, title), path)
