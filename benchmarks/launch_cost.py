"""What starting a process under the launcher costs, apart from the run: OpenTelemetry's launcher, and this package on it.

    python3 -m benchmarks.launch_cost                     # 30 rounds -> its section of benchmarks/RESULTS.md
    python3 -m benchmarks.launch_cost --rounds 3 --no-output   # proves it runs

A whole run's collector (`gym eval run`) is a fresh process: its CPU includes its start-up, a fixed cost
that a short run (400 rollouts of a scripted model) spreads over few rollouts. This measures that cost in
the whole run's own venv (`.venv-e2e-070`, NeMo Gym 0.7.0) and environment (the `gym` configuration's
OTLP/HTTP exporters, to a local receiver that answers 200), a process that does nothing (`python -c pass`)
started three ways, the ways taking turns within every round:

- plain: `python -c pass`;
- launcher: `opentelemetry-instrument python -c pass` with this package disabled too
  (`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=aiohttp-client,fastapi,gym`): OpenTelemetry's own start-up,
  the SDK, its exporters and the instrumentors' entry points;
- gym: the same with this package on, as the `gym` configuration starts every process.

The CPU of each process (user + system, from `wait4`, every thread, the launcher's own interpreter that
execs the program included) and the medians over the rounds, with a bootstrap interval of each median.
The measurement is the harness's (`gym_harness/bench/launch.py`, which the whole run's `--sizes` report
uses too); this file is its command and its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.sections import LAUNCH_COST, WHOLE_RUN_TOGETHER, code_version
from gym_harness.bench.launch import WAYS, measure, start_costs
from gym_harness.bench.stats import median_interval
from gym_harness.paths import BENCHMARKS, REPO
from gym_harness.processes import log, run_main

# The whole run this cost is set against (benchmarks/RESULTS.md, "This package alone"): rollouts per collection.
ROLLOUTS = 400


def report(cpu: dict[str, list[float]], commit: str) -> str:
    def median_with_interval(values: list[float]) -> str:
        low, high = median_interval(values)
        return f"{statistics.median(values):.0f} ms ({low:.0f} to {high:.0f})"

    costs = start_costs(cpu)
    what = {
        "plain": "`python -c pass`",
        "launcher": "`opentelemetry-instrument python -c pass`, this package disabled too",
        "gym": "the same with this package on (the `gym` configuration)",
    }
    lines = [
        "## Starting a process under the launcher",
        "",
        "`python3 -m benchmarks.launch_cost` (`make bench` keeps this section as it is): the CPU of starting a "
        "process that does nothing, in the whole run's venv and the `gym` configuration's environment, three ways "
        f"taking turns in each of {costs.rounds} rounds; median over the rounds (95% bootstrap interval of the median). "
        "A whole run's collector is a fresh process, so its CPU includes this once.",
        "",
        f"- Code: git {commit}; Python {sys.version.split()[0]} runs the harness, the venv's Python the processes",
        "",
        "| way | what starts | CPU per start |",
        "| --- | --- | ---: |",
        *(f"| {way} | {what[way]} | {median_with_interval(cpu[way])} |" for way in WAYS),
        "",
        "Within a round, median (95% interval): OpenTelemetry's launcher adds "
        f"{costs.launcher} to a plain start; this package on it adds {costs.package}; together {costs.together}.",
        "",
        f"Spread over a whole run's {ROLLOUTS} rollouts, the start of one process under the launcher with this "
        f"package is {costs.together.median / ROLLOUTS:.2f} ms of CPU per rollout, "
        f"{costs.package.median / ROLLOUTS:.3f} ms of it this package's.",
    ]
    return "\n".join(lines)


def run(options: argparse.Namespace) -> int:
    cpu = measure(options.rounds)
    text = report(cpu, code_version(REPO))
    print(text)
    if options.output is not None:
        LAUNCH_COST.write(options.output, text, before=WHOLE_RUN_TOGETHER)
        log(f"written to {options.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30, help="rounds, each starting every way once (default 30)")
    parser.add_argument(
        "--output", type=Path, default=BENCHMARKS / "RESULTS.md", help="the Markdown file whose launch_cost section is written"
    )
    parser.add_argument("--no-output", dest="output", action="store_const", const=None, help="print the section only")
    options = parser.parse_args(argv)
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    return run_main(lambda: run(options))


if __name__ == "__main__":
    sys.exit(main())
