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
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchmarks.sections import LAUNCH_COST, WHOLE_RUN_TOGETHER, code_version
from gym_harness.bench.stats import median_interval
from gym_harness.bench.workload import GYM_SETTINGS, RELEASE
from gym_harness.environment import otlp_variables
from gym_harness.paths import BENCHMARKS, REPO
from gym_harness.processes import log, run_main
from gym_harness.venvs import ensure_venv

WAYS = ("plain", "launcher", "gym")
# The whole run this cost is set against (benchmarks/RESULTS.md, "This package alone"): rollouts per collection.
ROLLOUTS = 400


class _Accept(BaseHTTPRequestHandler):
    """A receiver that takes every OTLP export and answers 200 with an empty body."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def environments(port: int) -> dict[str, dict[str, str]]:
    """Each way's environment: the `gym` configuration's, the launcher's with the package disabled, and none."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    gym = {**base, **otlp_variables("launch-cost", port), **dict(GYM_SETTINGS)}
    for variable in ("OTEL_BSP_SCHEDULE_DELAY", "OTEL_METRIC_EXPORT_INTERVAL"):  # as the whole run's gym has them
        gym.pop(variable, None)
    launcher = {**gym, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": gym["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] + ",gym"}
    return {"plain": base, "launcher": launcher, "gym": gym}


def cpu_of(command: Sequence[str], env: dict[str, str]) -> float:
    """The CPU seconds (user + system) of one run of ``command``, from its own rusage."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    errors = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if process.returncode != 0 or errors.strip():
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {errors.strip()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def measure(rounds: int) -> dict[str, list[float]]:
    venv_python = ensure_venv(RELEASE, with_package=True)
    launcher = venv_python.parent / "opentelemetry-instrument"
    commands = {
        "plain": [str(venv_python), "-c", "pass"],
        "launcher": [str(launcher), str(venv_python), "-c", "pass"],
        "gym": [str(launcher), str(venv_python), "-c", "pass"],
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        envs = environments(server.server_address[1])
        for way in WAYS:  # one untimed start each: the files are in the page cache for every timed one
            cpu_of(commands[way], envs[way])
        cpu: dict[str, list[float]] = {way: [] for way in WAYS}
        for number in range(rounds):
            order = WAYS[number % 3 :] + WAYS[: number % 3]  # each way in each position equally often
            for way in order:
                cpu[way].append(cpu_of(commands[way], envs[way]) * 1000)
        return cpu
    finally:
        server.shutdown()


def report(cpu: dict[str, list[float]], commit: str) -> str:
    def median_with_interval(values: list[float]) -> str:
        low, high = median_interval(values)
        return f"{statistics.median(values):.0f} ms ({low:.0f} to {high:.0f})"

    rounds = len(cpu["plain"])
    launcher = [a - b for a, b in zip(cpu["launcher"], cpu["plain"], strict=True)]
    package = [a - b for a, b in zip(cpu["gym"], cpu["launcher"], strict=True)]
    whole = [a - b for a, b in zip(cpu["gym"], cpu["plain"], strict=True)]
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
        f"taking turns in each of {rounds} rounds; median over the rounds (95% bootstrap interval of the median). "
        "A whole run's collector is a fresh process, so its CPU includes this once.",
        "",
        f"- Code: git {commit}; Python {sys.version.split()[0]} runs the harness, the venv's Python the processes",
        "",
        "| way | what starts | CPU per start |",
        "| --- | --- | ---: |",
        *(f"| {way} | {what[way]} | {median_with_interval(cpu[way])} |" for way in WAYS),
        "",
        "Within a round, median (95% interval): OpenTelemetry's launcher adds "
        f"{median_with_interval(launcher)} to a plain start; this package on it adds {median_with_interval(package)}; "
        f"together {median_with_interval(whole)}.",
        "",
        f"Spread over a whole run's {ROLLOUTS} rollouts, the start of one process under the launcher with this "
        f"package is {statistics.median(whole) / ROLLOUTS:.2f} ms of CPU per rollout, "
        f"{statistics.median(package) / ROLLOUTS:.3f} ms of it this package's.",
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
