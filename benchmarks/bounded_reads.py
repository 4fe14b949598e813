"""Hostile inputs to every reader: peak memory of the real commands on files with no newline.

    python benchmarks/bounded_reads.py                 # 1 GiB and 200 MiB files -> its section of benchmarks/RESULTS.md
    python benchmarks/bounded_reads.py --quick --output /tmp/results.md   # 64 and 40 MiB: proves it runs

Each case runs in a fresh process and reads that process's own high-water mark (``VmHWM``): the
commands ``report``, ``compare``, ``replay`` and ``config check`` on a sparse file of zero bytes
(no newline), a program's start with ``OTEL_PYTHON_GYM_CONFIG`` naming it, and a health pass's
lookup reading a links file whose one entry line has no newline (and one with no newline at all).
The same commands on small, valid inputs are the reference: what the bound adds is the rest. A
memory figure, not a speed figure: it does not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sections import BOUNDED_READS  # benchmarks/ is the script's directory, first on sys.path

REPOSITORY = Path(__file__).resolve().parents[1]
RUN = REPOSITORY / "tests" / "data" / "e2e_runs" / "nemo-gym-0.7.0"
FULL = (1 << 30, 200 << 20)  # (the sparse file, the links file)
QUICK = (64 << 20, 40 << 20)
BOUND_MIB = 256
# Runs ARGV[1] (a module, run as __main__, or "-c" and code) with the rest as its arguments, then prints
# its own peak RSS (KiB) on stderr's last line: VmHWM (ru_maxrss would count the parent's pages too).
PROBE = """
import runpy, sys
what, sys.argv = sys.argv[1], sys.argv[1:]
try:
    if what == "-c":
        sys.argv = sys.argv[1:]
        exec(compile(sys.argv[0], "<case>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module(what, run_name="__main__")
except SystemExit:
    pass
finally:
    with open("/proc/self/status") as status:
        print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")), file=sys.stderr)
"""
START = "from gym_instrument import GymInstrumentor\nGymInstrumentor().instrument()\n"
LOOKUP = (
    "import sys\nfrom gym_instrument.link.files import LinkFiles\n"
    "found = list(LinkFiles(None).lookup([sys.argv[1]], [(None, 0, 0)]))\nassert found == [None], found\n"
)
CLI = "gym_instrument.tools.cli"


def peak_mib(arguments: list[str], env: dict[str, str] | None = None) -> float:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), **(env or {})}
    process = subprocess.run(
        [sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True, env=environment, check=False
    )
    lines = process.stderr.strip().splitlines()
    if not lines or not lines[-1].isdigit():
        raise RuntimeError(f"{arguments}: {process.stderr[-2000:]}")
    return int(lines[-1]) / 1024


def sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with path.open("wb") as out:
        out.write(head)
        out.truncate(size)
    return path


def cases(
    folder: Path, size: int, links_size: int
) -> list[tuple[str, str, list[str], dict[str, str] | None, list[str], dict[str, str] | None]]:
    """(input, command, arguments, environment, reference arguments, reference environment)."""
    big = sparse(folder / "big.jsonl", size)
    spans, rollouts = RUN / "live_spans.otlp.jsonl", RUN / "rollouts.jsonl"
    config = folder / "config.toml"
    config.write_text('[[targets]]\npath = "m:f"\nrole = "dispatch"\n')
    output = folder / "rollouts.jsonl"
    links = folder / ".gym-links"
    links.mkdir(mode=0o700)
    header = json.dumps({"gym_links": 1, "output": output.name, "output_path": None, "started_ns": 1}).encode() + b"\n"
    sparse(links / f"rollouts.jsonl.entry{'.links'}", links_size, header)
    no_newline = folder / "other"
    no_newline.mkdir()
    (no_newline / ".gym-links").mkdir(mode=0o700)
    sparse(no_newline / ".gym-links" / "rollouts.jsonl.whole.links", links_size)
    mib, links_mib = f"{size >> 20:,} MiB", f"{links_size >> 20:,} MiB"
    return [
        (
            f"{mib} sparse file",
            "report FILE --no-html",
            [CLI, "report", str(big), "--no-html"],
            None,
            [CLI, "report", str(spans), "--no-html"],
            None,
        ),
        (
            f"{mib} sparse file",
            "compare FILE FILE",
            [CLI, "compare", str(big), str(big)],
            None,
            [CLI, "compare", str(spans), str(spans)],
            None,
        ),
        (
            f"{mib} sparse file",
            "replay FILE --output OUT",
            [CLI, "replay", str(big), "--output", str(folder / "a.jsonl")],
            None,
            [CLI, "replay", str(rollouts), "--output", str(folder / "b.jsonl")],
            None,
        ),
        (
            f"{mib} sparse file",
            "config check FILE",
            [CLI, "config", "check", str(big)],
            None,
            [CLI, "config", "check", str(config)],
            None,
        ),
        (
            f"{mib} sparse file",
            "start with OTEL_PYTHON_GYM_CONFIG=FILE",
            ["-c", START],
            {"OTEL_PYTHON_GYM_CONFIG": str(big)},
            ["-c", START],
            {"OTEL_PYTHON_GYM_CONFIG": str(config)},
        ),
        (
            f"links file: a header, then {links_mib} with no newline",
            "a health pass's lookup",
            ["-c", LOOKUP, str(output)],
            None,
            ["-c", LOOKUP, str(folder / "none" / "rollouts.jsonl")],
            None,
        ),
        (
            f"links file: {links_mib} with no newline",
            "a health pass's lookup",
            ["-c", LOOKUP, str(no_newline / "rollouts.jsonl")],
            None,
            ["-c", LOOKUP, str(folder / "none" / "rollouts.jsonl")],
            None,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB and 40 MiB files: prove it runs")
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md", help="the Markdown file to update"
    )
    options = parser.parse_args(argv)
    size, links_size = QUICK if options.quick else FULL
    lines = [
        "## Hostile inputs: every reader's peak memory",
        "",
        "`python benchmarks/bounded_reads.py` (`make bench` keeps this section as it is): each command in a fresh"
        " process, its own high-water mark (`VmHWM`), on a file with no newline (sparse: zero bytes); the reference is"
        f" the same command on a small valid input. A line may be 32 MiB, a configuration file 1 MiB; the bound is"
        f" {BOUND_MIB} MiB.",
        "",
        "| input | command | peak memory (RSS) | reference (small valid input) | within the bound |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="gym-bounded-bench-") as name:
        for given, command, arguments, env, reference, reference_env in cases(Path(name), size, links_size):
            peak, base = peak_mib(arguments, env), peak_mib(reference, reference_env)
            worst = max(worst, peak)
            print(f"{command}: {peak:.0f} MiB (reference {base:.0f} MiB)", file=sys.stderr, flush=True)
            lines.append(f"| {given} | `{command}` | {peak:.0f} MiB | {base:.0f} MiB | {'yes' if peak <= BOUND_MIB else 'NO'} |")
    body = "\n".join(lines)
    BOUNDED_READS.write(options.output, body)
    print(body)
    print(f"written to {options.output}")
    return 0 if worst <= BOUND_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
