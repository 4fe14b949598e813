"""``gym-instrument report`` on a million rollouts: peak memory and time, streaming.

    python benchmarks/report_memory.py                 # the sizes below -> its section of benchmarks/RESULTS.md
    python benchmarks/report_memory.py --quick --output /tmp/results.md   # tiny sizes: proves it runs

Writes an OTLP/JSON file in the SDK file exporter's shape (one line per batch of 512 spans; a
dispatch, a verify and a health span per rollout; log-normal durations, rewards 0/1, one rollout
in 50 failed, one in 10 unhealthy), then runs the real command on it in a fresh process
(``gym-instrument report FILE --format json`` plus the HTML page) and reads that process's peak
resident memory (``ru_maxrss``) and wall time. The sizes differ in rollouts and in tasks, so the
rows show what grows with which.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sections import REPORT_MEMORY  # benchmarks/ is the script's directory, first on sys.path

BATCH = 512
FULL = [(100_000, 6_250), (1_000_000, 62_500), (1_000_000, 1_000)]  # (rollouts, tasks)
QUICK = [(2_000, 125), (4_000, 125)]
RESOURCE = {"attributes": [{"key": "service.name", "value": {"stringValue": "bench"}}]}
SCOPE = {"name": "gym_instrument", "version": "0.1.0"}
# `python -m gym_instrument.tools.report ARGS`, then its own peak RSS (KiB) on stderr's last line: VmHWM, the
# high-water mark of this program's memory (ru_maxrss would also count the parent's pages it was forked with).
PROBE = """
import resource, runpy, sys
sys.argv[0] = "gym_instrument.tools.report"
try:
    runpy.run_module("gym_instrument.tools.report", run_name="__main__")
finally:
    try:
        with open("/proc/self/status") as status:
            peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(peak, file=sys.stderr)
"""
CHECKS = ["model_call_failed", "agent_turn_hollow", "rollout_token_count_mismatch"]


def _attributes(values: dict[str, object]) -> list[dict[str, object]]:
    encoded = []
    for key, value in values.items():
        if isinstance(value, bool):
            encoded.append({"key": key, "value": {"boolValue": value}})
        elif isinstance(value, int):
            encoded.append({"key": key, "value": {"intValue": str(value)}})
        elif isinstance(value, float):
            encoded.append({"key": key, "value": {"doubleValue": value}})
        elif isinstance(value, list):
            encoded.append({"key": key, "value": {"arrayValue": {"values": [{"stringValue": item} for item in value]}}})
        else:
            encoded.append({"key": key, "value": {"stringValue": value}})
    return encoded


def _span(
    name: str, trace: int, span: int, parent: int | None, start: int, end: int, attributes: dict[str, object], **extra: object
) -> dict[str, object]:
    encoded: dict[str, object] = {"traceId": f"{trace:032x}", "spanId": f"{span:016x}", "flags": 256, "name": name, "kind": 1}
    if parent is not None:
        encoded["parentSpanId"] = f"{parent:016x}"
    encoded.update(startTimeUnixNano=str(start), endTimeUnixNano=str(end), attributes=_attributes(attributes), status={})
    encoded.update(extra)
    return encoded


def write_run(path: Path, rollouts: int, tasks: int, seed: int = 1) -> None:
    generator = random.Random(seed)
    repeats = rollouts // tasks
    clock = 1_796_000_000_000_000_000
    batch: list[dict[str, object]] = []
    with open(path, "w") as out:

        def flush() -> None:
            line = {"resourceSpans": [{"resource": RESOURCE, "scopeSpans": [{"scope": SCOPE, "spans": batch}]}]}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            batch.clear()

        health: list[tuple[int, int, str]] = []
        for number in range(rollouts):
            task_index, repeat = divmod(number, repeats)
            trace = generator.getrandbits(128) | 1
            rollout_id = f"{task_index}-{repeat}"
            duration = int(generator.lognormvariate(21, 0.8))  # about 1.3 s median
            start = clock + number * 1_000_000
            identity = {
                "nemo.gym.task.id": f"task-{task_index:06d}",
                "nemo.gym.rollout.repeat": repeat,
                "nemo.gym.task.index": task_index,
                "nemo.gym.rollout.id": rollout_id,
                "nemo.gym.agent.name": "bench_agent",
            }
            if number % 50 == 49:
                failed = {**identity, "error.type": "aiohttp.client_exceptions.ServerDisconnectedError"}
                batch.append(_span("gym.rollout.dispatch", trace, 2, None, start, start + duration, failed, status={"code": 2}))
            else:
                reward = 1.0 if generator.random() < 0.4 + 0.5 * (task_index % 3) / 2 else 0.0
                verify = {"nemo.gym.rollout.id": rollout_id, "nemo.gym.rollout.reward": reward}
                batch.append(_span("gym.verify", trace, 3, 2, start + duration - 1000, start + duration - 10, verify))
                batch.append(_span("gym.rollout.dispatch", trace, 2, None, start, start + duration, identity))
                health.append((trace, number, rollout_id))
            if len(batch) >= BATCH:
                flush()
        if batch:
            flush()
        for trace, number, rollout_id in health:  # the health pass runs after the collection
            checks = [CHECKS[number % 3]] if number % 10 == 3 else []
            verdict = {
                "nemo.gym.health.checks": checks,
                "nemo.gym.health.verdict": "unhealthy" if checks else "healthy",
                "nemo.gym.rollout.id": rollout_id,
            }
            batch.append(_span("gym.rollout.health", trace, 4, 2, clock, clock, verdict))
            if len(batch) >= BATCH:
                flush()
        if batch:
            flush()


def measure(rollouts: int, tasks: int, folder: Path) -> dict[str, object]:
    spans = folder / f"spans-{rollouts}-{tasks}.jsonl"
    write_run(spans, rollouts, tasks)
    size = spans.stat().st_size
    arguments = [str(spans), "--format", "json", "--html", str(folder / "report.html")]
    started = time.perf_counter()
    process = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    peak_kib = int(process.stderr.strip().splitlines()[-1])
    figures = json.loads(process.stdout)
    run = figures["run"]
    assert run["dispatches"] == rollouts and run["tasks"] == tasks, run
    assert figures["health"]["spans"] == rollouts - rollouts // 50, figures["health"]["spans"]
    # Every rollout crossed with its verdict (one in 10 unhealthy; the failed ones have none), the all-rollouts table bounded.
    crossed = figures["reward_health"]["counts"]
    assert sum(sum(row.values()) for row in crossed.values()) == rollouts, crossed
    assert crossed["failed dispatch"] == {"no verdict": rollouts // 50}, crossed
    assert figures["rollouts"]["total"] == rollouts and figures["rollouts"]["listed"] <= 2000
    spans.unlink()
    page = (folder / "report.html").stat().st_size
    return {"rollouts": rollouts, "tasks": tasks, "bytes": size, "seconds": elapsed, "peak_mib": peak_kib / 1024, "page": page}


HEADER = [
    "## gym-instrument report on a million rollouts",
    "",
    "`python benchmarks/report_memory.py` (`make bench` keeps this section as it is): the real"
    " `gym-instrument report FILE --format json --html OUT` in a fresh process on an OTLP/JSON file of a dispatch,"
    " a verify and a health span per rollout, in the"
    " SDK file exporter's shape (512 spans a line). Peak memory is that process's own high-water mark (`VmHWM`);"
    " time is its wall time.",
    "",
]
ABOUT = [
    "The file is read line by line; every span is kept as part of its rollout's compact record (arrays: about 70 bytes a"
    " rollout and 25 a verify, no span kept), the records are joined once everything is read and each rollout is decided"
    " once; the other figures are kept per task (plus fixed-size lists and sketches), so memory follows the number of"
    " rollouts (those records), of tasks and of the per-task rows of the output. The page embeds at most 2,000 rollouts"
    " and 5,000 tasks (the counts are over all).",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: prove it runs")
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md", help="the Markdown file to update"
    )
    options = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gym-report-bench-") as folder:
        for rollouts, tasks in QUICK if options.quick else FULL:
            row = measure(rollouts, tasks, Path(folder))
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    lines = [
        "| rollouts | tasks × repeats | spans file | peak memory (RSS) | time | rollouts/s | HTML page |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        rollouts, tasks = int(row["rollouts"]), int(row["tasks"])  # type: ignore[call-overload]
        lines.append(
            f"| {rollouts:,} | {tasks:,} × {rollouts // tasks} | {int(row['bytes']) / 2**20:,.0f} MiB"  # type: ignore[call-overload]
            f" | {row['peak_mib']:.0f} MiB | {row['seconds']:.0f} s | {rollouts / float(row['seconds']):,.0f}"  # type: ignore[arg-type]
            f" | {int(row['page']) / 2**20:,.1f} MiB |"  # type: ignore[call-overload]
        )
    body = "\n".join([*HEADER, *lines, "", *ABOUT])
    REPORT_MEMORY.write(options.output, body)
    print(body)
    print(f"written to {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
