"""The ``gym-instrument`` command: ``report`` (what a run's spans say) and ``replay`` (spans from a run's files).

::

    gym-instrument report PATH... [--html OUT.html] [--format text|json] [--trace-url TEMPLATE]
    gym-instrument replay RUN_DIR [--output FILE]

Both need the ``report`` extra: ``pip install 'gym-instrument[report]'``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from gym_instrument.tools.report.figures import TRACE_URL_PRESETS

    parser = argparse.ArgumentParser(prog="gym-instrument", description="Look at a rollout run's spans.")
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser(
        "report",
        help="summarise a run's spans (OTLP/JSON lines) in the terminal and as one HTML page",
        description="Read the spans of a run (OTLP/JSON lines, as OpenTelemetry's file exporter and the Collector's "
        "file exporter write them) and summarise them: per task, health, time. Files are read streaming.",
    )
    report.add_argument("paths", nargs="+", metavar="PATH", help="span files, or directories of them")
    report.add_argument(
        "--html", metavar="OUT.html", help="where the HTML page goes (default: report.html beside the first PATH)"
    )
    report.add_argument("--no-html", action="store_true", help="write no HTML page")
    report.add_argument(
        "--format", choices=("text", "json"), default="text", help="terminal output: a summary, or every figure as JSON"
    )
    presets = ", ".join(f"{name} = {template}" for name, template in TRACE_URL_PRESETS.items())
    report.add_argument(
        "--trace-url",
        metavar="TEMPLATE",
        help="link each rollout to its trace: a URL with {trace_id} (and optionally {span_id}), or a ready one: " + presets,
    )
    report.add_argument(
        "--success-threshold", type=float, default=1.0, metavar="R", help="a reward >= R is a success (default 1.0)"
    )
    report.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default: long reads on a terminal)"
    )

    replay = commands.add_parser(
        "replay",
        help="turn a past NeMo Gym run's files into the spans the live instrumentation makes",
        description="Read rollouts.jsonl (and <stem>_failures.jsonl, <stem>_materialized_inputs.jsonl, rollout_verdicts.jsonl "
        "where present) and make dispatch, verify and health spans, marked gym.replayed=true.",
    )
    replay.add_argument("run_dir", metavar="RUN_DIR", help="a run's output directory, or its rollouts .jsonl file")
    replay.add_argument(
        "--output", metavar="FILE", help="write OTLP/JSON lines here (default: the exporter OTEL_TRACES_EXPORTER names)"
    )
    replay.add_argument("--append", action="store_true", help="append to --output instead of starting it afresh")
    return parser


def _default_html(first: str) -> Path:
    path = Path(first)
    return (path if path.is_dir() else path.parent) / "report.html"


def report_command(args: argparse.Namespace) -> int:
    from gym_instrument.tools.report import build_report, write_html
    from gym_instrument.tools.report.text import summary

    try:
        figures = build_report(
            args.paths, trace_url=args.trace_url, success_threshold=args.success_threshold, progress=args.progress
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"gym-instrument report: {error}", file=sys.stderr)
        return 2
    html_path = None
    if not args.no_html:
        html_path = write_html(figures, args.html or _default_html(args.paths[0]))
    if args.format == "json":
        json.dump(figures, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(summary(figures, str(html_path) if html_path else None))
    return 0


def replay_command(args: argparse.Namespace) -> int:
    from gym_instrument.tools.replay import replay

    try:
        counts = replay(args.run_dir, output=args.output, append=args.append)
    except (FileNotFoundError, ValueError) as error:
        print(f"gym-instrument replay: {error}", file=sys.stderr)
        return 2
    where = args.output or "the configured exporter"
    print(
        f"replayed {counts.dispatches} dispatches ({counts.failed_dispatches} failed), {counts.verifies} verify and"
        f" {counts.health} health spans to {where}; durations measured for {counts.measured},"
        f" placeholders for {counts.placeholders}"
        + (f"; {counts.unreadable_lines} unreadable lines skipped" if counts.unreadable_lines else "")
        + (f"; {counts.verdicts_without_rollout} verdicts name no replayed rollout" if counts.verdicts_without_rollout else "")
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "report":
        return report_command(args)
    return replay_command(args)


if __name__ == "__main__":
    sys.exit(main())
