"""``gym-instrument report``: what a run's spans say, as a terminal summary, JSON and one HTML page.

Usage::

    gym-instrument report spans.jsonl [more.jsonl | a-directory ...] --html report.html
    gym-instrument report spans/ --format json > figures.json
    gym-instrument report spans.jsonl --trace-url phoenix      # rollout rows link to Phoenix
    python -m gym_instrument.tools.report spans.jsonl                # the same

From Python::

    from gym_instrument.tools.report import build_report, write_html

    figures = build_report(["spans.jsonl"], trace_url="mlflow")
    write_html(figures, "report.html")

The input is OTLP/JSON lines as OpenTelemetry's file exporter and the Collector's file exporter
write them (see :mod:`gym_instrument.tools.report.otlp`); the figures are computed in one streaming
pass in bounded memory (see :mod:`gym_instrument.tools.report.figures`). Needs the ``report`` extra
(``pip install 'gym-instrument[report]'``) for the pictures and the progress bar.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gym_instrument.tools.report.figures import RunFigures, trace_url_template
from gym_instrument.tools.report.otlp import ReadStats, read_spans, span_files

__all__ = ["build_report", "write_html"]


def build_report(
    paths: Sequence[str | os.PathLike[str]],
    trace_url: str | None = None,
    success_threshold: float = 1.0,
    progress: bool | None = None,
) -> dict[str, Any]:
    """The figures of the run whose spans are in ``paths`` (files, or directories of them)."""
    template = trace_url_template(trace_url)
    stats = ReadStats()
    run = RunFigures(success_threshold=success_threshold, trace_url=template)
    run.add_all(read_spans(span_files(paths), stats, progress=progress))
    return run.figures(stats)


def write_html(figures: dict[str, Any], path: str | os.PathLike[str], title: str = "gym-instrument report") -> Path:
    """Write the self-contained HTML page of ``figures`` to ``path``."""
    from gym_instrument.tools.report.page import render

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(figures, title), encoding="utf-8")
    return target
