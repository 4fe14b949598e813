"""The ``gym-instrument`` command: ``report`` (what a run's spans say), ``compare`` (run B against run A)
and ``replay`` (spans from a run's files).

::

    gym-instrument report PATH... [--html OUT.html | --no-html] [--format text|json] [--trace-url TEMPLATE]
                          [--max-infra-failures SHARE]
    gym-instrument compare RUN_A RUN_B [--html OUT.html] [--format text|json] [--max-infra-failures SHARE]
    gym-instrument --version
    gym-instrument replay RUN_DIR [--output FILE]
    gym-instrument config check [FILE] [--targets TARGETS]

``report`` and ``compare`` need only the base install (``pip install gym-instrument``): the page's
charts are inline SVG. ``replay`` needs the ``report`` extra (the SDK and OpenTelemetry's OTLP/JSON
file exporter): without it, it says so in one line. ``config check`` reads a configuration (a file
in the declarative form, targets in the ``OTEL_PYTHON_GYM_TARGETS`` form, or else those of its
environment), imports each target's module as the run would, and says what each target and rule
will do.

No command ends in a traceback: a path that
does not exist or holds no spans is one line and exit code 2, a missing extra exit code 3, and
anything unexpected one line and exit code 1 (``GYM_INSTRUMENT_DEBUG=1`` shows the traceback).

No command writes over one of its inputs, and none replaces an existing file it did not make
(``--force`` allows it): each is refused in one line, exit code 2, before anything is read.
``report`` and ``compare`` exit with code 4 when a run's infrastructure failures (failed dispatches,
failure kinds, masked verifies) are over ``--max-infra-failures`` (default 5 %): the first line says
so, and the summary and the page are written all the same. A reader that stops reading
(``gym-instrument report ... | head``) ends the output, not the exit code: the command exits with the
code it decided, quietly.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_MISSING_EXTRA = 3
EXIT_INFRA_FAILURES = 4
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a command its reader left before it decided
EXTRA = "pip install 'gym-instrument[report]'"
# What replay imports beyond the base install, as (module, distribution).
REPLAY_NEEDS = (("opentelemetry.sdk", "opentelemetry-sdk"),)
FILE_EXPORTER = ("opentelemetry.exporter.otlp.json.file", "opentelemetry-exporter-otlp-json-file")

FORCE_HELP = "replace an existing output file that gym-instrument did not write (never one of the inputs)"
EPILOG = (
    "exit codes: 0 done, 1 an unexpected error (one line; GYM_INSTRUMENT_DEBUG=1 for the traceback), "
    "2 bad input (a path that does not exist, no spans in it, a bad option), 3 a missing extra, "
    "4 (report, compare) a run's infrastructure failures over --max-infra-failures (the report is written all the same)"
)
INFRA_HELP = (
    "the share of rollouts that may fail for the infrastructure (a failed dispatch, a failure kind, a masked verify) "
    "before the first line says so and the exit code is 4: 5%% or 0.05 (default 5%%)"
)


def share(text: str) -> float:
    """A ``--max-infra-failures`` value: ``5%`` or ``0.05``."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share: {text!r} (5% or 0.05)") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share is between 0% and 100% (0 and 1): {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    from gym_instrument.tools.report.links import TRACE_URL_PRESETS
    from gym_instrument.version import __version__

    parser = argparse.ArgumentParser(
        prog="gym-instrument", description=f"Look at a rollout run's spans (gym-instrument {__version__}).", epilog=EPILOG
    )
    parser.add_argument("--version", action="version", version=f"gym-instrument {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser(
        "report",
        help="summarise a run's spans (OTLP/JSON lines) in the terminal and as one HTML page",
        description="Read the spans of a run (OTLP/JSON lines, as OpenTelemetry's file exporter and the Collector's "
        "file exporter write them) and summarise them: per task, per rollout, reward against health, time. "
        "Files are read streaming.",
        epilog=EPILOG,
    )
    report.add_argument("paths", nargs="+", metavar="PATH", help="span files, or directories of them")
    report.add_argument(
        "--html",
        metavar="OUT.html",
        help="where the HTML page goes; a folder: its report.html (default: report.html beside the first PATH)",
    )
    report.add_argument("--no-html", action="store_true", help="write no HTML page")
    report.add_argument("--force", action="store_true", help=FORCE_HELP)
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
    report.add_argument("--max-infra-failures", type=share, default=0.05, metavar="SHARE", help=INFRA_HELP)
    report.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: long reads on a terminal; needs the report extra)",
    )

    compare = commands.add_parser(
        "compare",
        help="run B against run A: per task and overall, reward, success, pass@k, unhealthy and failed",
        description="Read two runs' spans (each a span file or a folder of them, a replayed run's folder included) and "
        "compare them per task and overall, the tasks that got worse first.",
        epilog=EPILOG,
    )
    compare.add_argument("run_a", metavar="RUN_A", help="the first run (the baseline): a span file or a folder")
    compare.add_argument("run_b", metavar="RUN_B", help="the second run: a span file or a folder")
    compare.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write the comparison as an HTML page (a folder: its compare.html), with each run's report beside it"
        " (OUT-a.html, OUT-b.html)",
    )
    compare.add_argument("--force", action="store_true", help=FORCE_HELP)
    compare.add_argument("--format", choices=("text", "json"), default="text", help="terminal output: a summary, or JSON")
    compare.add_argument(
        "--success-threshold", type=float, default=1.0, metavar="R", help="a reward >= R is a success (default 1.0)"
    )
    compare.add_argument("--max-infra-failures", type=share, default=0.05, metavar="SHARE", help=INFRA_HELP)

    replay = commands.add_parser(
        "replay",
        help="turn a past NeMo Gym run's files into the spans the live instrumentation makes",
        description="Read rollouts.jsonl (and <stem>_failures.jsonl, <stem>_materialized_inputs.jsonl, rollout_verdicts.jsonl "
        "where present) and make dispatch, verify and health spans, marked gym.replayed=true. "
        "Needs the report extra: " + EXTRA,
        epilog=EPILOG,
    )
    replay.add_argument("run_dir", metavar="RUN_DIR", help="a run's output directory, or its rollouts .jsonl file")
    replay.add_argument(
        "--output", metavar="FILE", help="write OTLP/JSON lines here (default: the exporter OTEL_TRACES_EXPORTER names)"
    )
    replay.add_argument("--append", action="store_true", help="append to --output instead of starting it afresh")
    replay.add_argument("--force", action="store_true", help=FORCE_HELP)

    config = commands.add_parser(
        "config", help="check a configuration (OTEL_PYTHON_GYM_CONFIG, OTEL_PYTHON_GYM_TARGETS) before a run", epilog=EPILOG
    )
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser(
        "check",
        help="say, per target, whether it can be found and what each rule will read",
        description="Read a configuration as a run would: FILE (a TOML or .json file, or its text) as "
        "OTEL_PYTHON_GYM_CONFIG, --targets as OTEL_PYTHON_GYM_TARGETS; with neither, those two variables of the "
        "environment. Say per target whether this interpreter can find it (each target's module is imported, as "
        "the run imports it: its import-time code runs) and what each rule reads. Exit code 2 when there is a problem.",
        epilog=EPILOG,
    )
    check.add_argument("source", metavar="FILE", nargs="?", help="a TOML or .json file, or the configuration's text")
    check.add_argument(
        "--targets",
        metavar="TARGETS",
        help="targets as OTEL_PYTHON_GYM_TARGETS names them: module:Qualified.name=role[@schema], ...",
    )
    return parser


class CommandError(Exception):
    """One line for the user and an exit code."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _default_html(first: str) -> Path:
    path = Path(first)
    return (path if path.is_dir() else path.parent) / "report.html"


def _check_output(path: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]], args: argparse.Namespace) -> None:
    """Refuse (one line, exit 2) an output over an input, or over a file the package did not make without --force."""
    from gym_instrument.tools.outputs import output_refusal

    refusal = output_refusal(path, inputs, force=args.force, append=getattr(args, "append", False))
    if refusal is not None:
        raise CommandError(refusal)


def _span_inputs(paths: Sequence[str]) -> list[Any]:
    """The span files the paths name (the paths themselves where one does not exist: the read says so)."""
    from gym_instrument.tools.report.otlp import span_files

    try:
        return [*span_files(paths), *paths]
    except OSError:
        return list(paths)


def _html_path(given: str, name: str) -> Path:
    """``--html``: a file, or a folder (one that exists, or a path ending in ``/``) for its ``name``."""
    path = Path(given)
    if path.is_dir() or given.endswith(("/", os.sep)):
        return path / name
    return path


def _quiet_stdout() -> None:
    """The reader of standard output left: what is still written there (Python's flush at exit too) goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _emit(chunks: Iterable[str]) -> None:
    """Write a command's output; a reader that left (``| head``) ends the output, not the command."""
    try:
        for chunk in chunks:
            sys.stdout.write(chunk)
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()


def _json(figures: dict[str, Any]) -> Iterable[str]:
    """Figures as indented JSON, piece by piece (one string of a large run's figures would double the peak memory)."""
    yield from json.JSONEncoder(indent=1).iterencode(figures)
    yield "\n"


def _infra_code(*figures: dict[str, Any]) -> int:
    """Exit code 4 when a run's infrastructure failures are over ``--max-infra-failures``, else 0."""
    return EXIT_INFRA_FAILURES if any(item["infra_failures"]["over_limit"] for item in figures) else 0


def _figures(paths: Sequence[str], args: argparse.Namespace, trace_url: str | None = None) -> dict[str, Any]:
    from gym_instrument.tools.report import build_report

    try:
        return build_report(
            paths,
            trace_url=trace_url,
            success_threshold=args.success_threshold,
            progress=getattr(args, "progress", None),
            max_infra_failures=args.max_infra_failures,
        )
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None


def report_command(args: argparse.Namespace) -> int:
    from gym_instrument.tools.report import write_html
    from gym_instrument.tools.report.text import summary

    html_target = None
    if not args.no_html:
        html_target = _html_path(args.html, "report.html") if args.html else _default_html(args.paths[0])
    if html_target is not None:
        _check_output(html_target, _span_inputs(args.paths), args)
    figures = _figures(args.paths, args, args.trace_url)
    html_path = None
    if html_target is not None:
        name = ", ".join(Path(path).name or str(path) for path in args.paths[:3]) + (" …" if len(args.paths) > 3 else "")
        html_path = write_html(figures, html_target, title=f"gym-instrument report: {name}")
    code = _infra_code(figures)  # decided before a word is written: a reader that leaves early cannot change it
    if args.format == "json":
        _emit(_json(figures))
    else:
        _emit([summary(figures, str(html_path) if html_path else None), "\n"])
    return code


def compare_command(args: argparse.Namespace) -> int:
    from gym_instrument.tools.report import write_compare_html, write_html
    from gym_instrument.tools.report.compare import compare, summary

    html_path = _html_path(args.html, "compare.html") if args.html else None
    if html_path is not None:
        inputs = _span_inputs([args.run_a, args.run_b])
        for output in (html_path, *(html_path.with_name(f"{html_path.stem}-{side}.html") for side in "ab")):
            _check_output(output, inputs, args)
    run_a, run_b = _figures([args.run_a], args), _figures([args.run_b], args)
    comparison = compare(run_a, run_b, args.run_a, args.run_b)
    title = f"gym-instrument compare: {Path(args.run_a).name} → {Path(args.run_b).name}"
    if html_path is not None:
        for side, figures, source in (("a", run_a, args.run_a), ("b", run_b, args.run_b)):  # each run's own report, beside it
            page = write_html(
                figures, html_path.with_name(f"{html_path.stem}-{side}.html"), title=f"gym-instrument report: {source}"
            )
            comparison[side]["report"] = str(page)
        write_compare_html(comparison, html_path, title=title)
    code = _infra_code(run_a, run_b)
    if args.format == "json":
        _emit(_json(comparison))
    else:
        _emit([summary(comparison, str(html_path) if html_path else None), "\n"])
    return code


def missing_modules(needed: Sequence[tuple[str, str]]) -> list[str]:
    """The distributions of ``needed`` whose module cannot be imported here."""
    missing = []
    for module, distribution in needed:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is missing
            found = False
        if not found:
            missing.append(distribution)
    return missing


def replay_command(args: argparse.Namespace) -> int:
    missing = missing_modules([*REPLAY_NEEDS, *([FILE_EXPORTER] if args.output else [])])
    if missing:
        raise CommandError(
            f"replay needs the OpenTelemetry SDK and its OTLP/JSON file exporter, not installed here ({', '.join(missing)}):"
            f" {EXTRA}",
            EXIT_MISSING_EXTRA,
        )
    from gym_instrument.tools.replay import find_runs, replay

    if args.output:
        try:
            runs = find_runs(args.run_dir)
        except (FileNotFoundError, ValueError) as error:
            raise CommandError(str(error)) from None
        inputs = [path for run in runs for path in (run.rollouts, run.failures, run.materialized, run.verdicts) if path]
        _check_output(args.output, [*inputs, args.run_dir], args)
    try:
        counts = replay(args.run_dir, output=args.output, append=args.append)
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from None
    where = args.output or "the configured exporter"
    print(
        f"replayed {counts.dispatches} dispatches ({counts.failed_dispatches} failed), {counts.verifies} verify and"
        f" {counts.health} health spans to {where}; durations measured for {counts.measured},"
        f" placeholders for {counts.placeholders}"
        + (f"; {counts.unreadable_lines} unreadable lines skipped" if counts.unreadable_lines else "")
        + (f"; {counts.verdicts_without_rollout} verdicts name no replayed rollout" if counts.verdicts_without_rollout else "")
    )
    return 0


def config_command(args: argparse.Namespace) -> int:
    from gym_instrument.tools.config_check import check_config

    found = check_config(args.source, args.targets)
    print("\n".join(found.lines))
    if found.problems:
        print(f"{len(found.problems)} problem(s)", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("no problems")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "report": report_command,
    "compare": compare_command,
    "replay": replay_command,
    "config": config_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    name = f"gym-instrument {args.command}"
    try:
        return COMMANDS[args.command](args)
    except CommandError as error:
        print(f"{name}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # a reader left before the command decided (its output is written by _emit)
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:  # unreadable input, a page that cannot be written
        print(f"{name}: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:
        if os.environ.get("GYM_INSTRUMENT_DEBUG"):
            raise
        print(
            f"{name}: unexpected {type(error).__name__}: {error} (GYM_INSTRUMENT_DEBUG=1 shows where; please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
