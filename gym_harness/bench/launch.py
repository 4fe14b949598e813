"""What starting a process costs under OpenTelemetry's launcher, and this package on it (``benchmarks/launch_cost.py``).

A process that does nothing (``python -c pass``) started three ways in the whole run's venv and the ``gym``
configuration's environment, the ways taking turns within every round; the CPU of each start (user +
system, from ``wait4``, every thread, the launcher's own interpreter that execs the program included):

- plain: ``python -c pass``;
- launcher: ``opentelemetry-instrument python -c pass`` with this package disabled too
  (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=aiohttp-client,fastapi,gym``): OpenTelemetry's own start-up,
  the SDK, its exporters and the instrumentors' entry points;
- gym: the same with this package on, as the ``gym`` configuration starts every process.

The whole run's sizes report (``--sizes``) states these beside the fixed part of a collection.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gym_harness.bench.stats import median_interval
from gym_harness.bench.workload import GYM_SETTINGS, RELEASE
from gym_harness.environment import otlp_variables
from gym_harness.venvs import ensure_venv

WAYS = ("plain", "launcher", "gym")


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
    """Each way's CPU per start, ms, one start of each way per round."""
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


@dataclass(frozen=True)
class Added:
    """What one way adds to another's start, ms of CPU: the median of the rounds' own differences, with the
    95% bootstrap interval of that median."""

    median: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.median:.0f} ms ({self.low:.0f} to {self.high:.0f})"


def added(cpu: dict[str, list[float]], top: str, bottom: str) -> Added:
    """What ``top`` adds to ``bottom``'s start, round by round."""
    differences = [a - b for a, b in zip(cpu[top], cpu[bottom], strict=True)]
    return Added(statistics.median(differences), *median_interval(differences))


@dataclass(frozen=True)
class StartCosts:
    """The launcher's and this package's start costs, as ``launch_cost`` states them."""

    rounds: int
    launcher: Added  # OpenTelemetry's launcher over a plain start
    package: Added  # this package on the launcher
    together: Added  # both over a plain start


def start_costs(cpu: dict[str, list[float]]) -> StartCosts:
    return StartCosts(
        len(cpu["plain"]), added(cpu, "launcher", "plain"), added(cpu, "gym", "launcher"), added(cpu, "gym", "plain")
    )
