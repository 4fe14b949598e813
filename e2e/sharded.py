"""The sharded flow on NeMo Gym 0.7.0: health judged in processes that never dispatched.

Against one set of servers (`gym env start`, model-call capture on), each process under the
launcher with its own OTLP receiver:
  1. two shard collectors at once, `gym eval run --no-serve +disable_aggregation=true`, on two
     slices of the input stamped with a global `_ng_task_index` (no health pass there);
  2. `gym eval aggregate` with a glob as broad as a user would write, merging the shards into
     `out/rollouts.jsonl` and running the health pass (a process that dispatched nothing);
  3. `gym eval health-check out/` in a fresh process with another working directory and `HOME`,
     as another node would.
Per rollout of the merged rollouts.jsonl, each of the two health passes must make one health span,
a child of its dispatch (in a shard collector's receiver), with the verdict file's verdict and checks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import checks
from gym_harness.environment import Scratch, base_env
from gym_harness.gym_servers import gym_configs, server_venvs, start_servers
from gym_harness.jsonl import read_jsonl
from gym_harness.otlp_json import Received, read_received
from gym_harness.paths import E2E_DIR, MODEL_SERVER, WORK
from gym_harness.processes import E2EFailure, Processes, exited, free_port, log, port_open, tail, wait_for
from gym_harness.releases import Release

TIMEOUT_STEP = 300
TIMEOUT_SPANS = 60
SHARDS = 2
INPUTS = E2E_DIR / "data" / "tasks.jsonl"  # 5 flat mcqa and weather tasks: 3 in the first shard, 2 in the second


@dataclass
class PassResult:
    """What one pass (or the sharded flow) found: its checks, and the rollouts they covered."""

    label: str
    rollouts: int = 0
    report: checks.Report = field(default_factory=checks.Report)


def run_sharded(release: Release, venv_python: Path, marker: str, scratch: Scratch, repeats: int) -> Any:
    result = PassResult(f"nemo-gym {release.name} / sharded (aggregate, then health-check elsewhere)")
    report = result.report
    work = WORK / release.name / "sharded"
    work.mkdir(parents=True)
    out = work / "out"
    out.mkdir()
    bin_dir = release.venv / "bin"
    launcher = [str(bin_dir / "opentelemetry-instrument"), "--", str(bin_dir / "gym")]
    processes = Processes(base_env(release.venv, marker, free_port(), scratch))
    receivers: dict[str, Path] = {}
    started_at = time.monotonic()

    def receiver(name: str) -> dict[str, str]:
        """A receiver of its own for one process; that process's environment."""
        port = free_port()
        path = receivers[name] = work / f"received-{name}.ndjson"
        env = base_env(release.venv, marker, port, scratch)
        plain = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        started = processes.start(f"oteltap ({name})", [str(bin_dir / "oteltap"), "--port", str(port)], path, work, plain)
        wait_for(f"the OTLP receiver of {name}", lambda: port_open(port), 30, exited(started, "oteltap", path))
        return env

    def finish(process: subprocess.Popen[bytes], name: str, log_path: Path) -> None:
        try:
            process.wait(timeout=TIMEOUT_STEP)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"{name} did not finish in {TIMEOUT_STEP}s; log: {log_path}\n{tail(log_path)}") from None
        if process.returncode != 0:
            raise E2EFailure(f"{name} failed (exit {process.returncode}); log: {log_path}\n{tail(log_path)}")

    try:
        servers_env = receiver("servers")
        model_port_file, model_log = work / "model_server.port", work / "model_server.log"
        model_requests_path = work / "model_requests.jsonl"
        plain = {k: v for k, v in servers_env.items() if not k.startswith("OTEL_")}
        model = processes.start(
            "model server",
            [
                str(venv_python),
                str(MODEL_SERVER),
                "--answers",
                str(INPUTS),
                "--port-file",
                str(model_port_file),
                "--request-log",
                str(model_requests_path),
            ],
            model_log,
            work,
            plain,
        )
        wait_for("the model server's port", model_port_file.exists, 30, exited(model, "model server", model_log))
        venvs_root = server_venvs(release, work)
        head_port = free_port()
        head = ["+head_server.host=127.0.0.1", f"+head_server.port={head_port}"]
        capture = ["+observability_enabled=true", f"+model_call_capture_dir={work / 'model-calls'}"]
        (work / "model-calls").mkdir()
        env_log = work / "gym_env_start.log"
        model_port = int(model_port_file.read_text())
        overrides = [f"+uv_venv_dir={venvs_root}", *head, *capture]
        env_start, _ = start_servers(
            processes, launcher, gym_configs(release, venv_python), model_port, overrides, env_log, work, servers_env
        )
        log(f"servers ready after {time.monotonic() - started_at:.0f}s")

        # 1. Two shard collectors at once, each on its slice, rows stamped with a global task index.
        tasks = [json.loads(line) for line in INPUTS.read_text().splitlines() if line.strip()]
        for index, task in enumerate(tasks):
            task["_ng_task_index"] = index
        slices = [tasks[: (len(tasks) + 1) // 2], tasks[(len(tasks) + 1) // 2 :]]
        collectors = []
        for number, rows in enumerate(slices):
            slice_path = work / f"slice-{number}.jsonl"
            slice_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
            name = f"shard-{number}"
            collect_log = work / f"gym_eval_run_{name}.log"
            command = [
                *launcher,
                "eval",
                "run",
                "--no-serve",
                "+disable_aggregation=true",
                f"+input_jsonl_fpath={slice_path}",
                f"+output_jsonl_fpath={out / f'rollouts-rs{number}-chunk0.jsonl'}",
                f"+num_repeats={repeats}",
                "+num_samples_in_parallel=4",
                *head,
                *capture,
            ]
            collectors.append((processes.start(name, command, collect_log, work, receiver(name)), name, collect_log))
        for process, name, collect_log in collectors:
            finish(process, name, collect_log)
        log(f"shards collected after {time.monotonic() - started_at:.0f}s")
        report.check(
            not (out / "rollout_verdicts.jsonl").exists(), "a shard collector ran a health pass (+disable_aggregation=true)"
        )

        # 2. The aggregation: a glob as broad as a user writes (every rollouts-rs* file in out/).
        aggregate_log = work / "gym_eval_aggregate.log"
        aggregate = processes.start(
            "gym eval aggregate",
            [
                *launcher,
                "eval",
                "aggregate",
                "--input-glob",
                f"{out}/rollouts-rs*",
                "--output",
                str(out / "rollouts.jsonl"),
                "+merge_shards=true",
                *head,
            ],
            aggregate_log,
            work,
            receiver("aggregate"),
        )
        finish(aggregate, "gym eval aggregate", aggregate_log)
        shards_read = re.findall(r"^\s+- (.+)$", aggregate_log.read_text(errors="replace"), re.MULTILINE)
        report.check(
            sorted(Path(p).name for p in shards_read) == [f"rollouts-rs{n}-chunk0.jsonl" for n in range(SHARDS)],
            f"gym eval aggregate read {shards_read} as shards (links files must never be one)",
        )
        verdicts_path = out / "rollout_verdicts.jsonl"
        aggregated_verdicts = read_jsonl(verdicts_path)

        # 3. The re-check, as another node would: another working directory and HOME.
        elsewhere = work / "elsewhere"
        (elsewhere / "home").mkdir(parents=True)
        recheck_env = receiver("health-check")
        recheck_env["HOME"] = str(elsewhere / "home")
        recheck_log = work / "gym_eval_health_check.log"
        recheck = processes.start(
            "gym eval health-check", [*launcher, "eval", "health-check", str(out)], recheck_log, elsewhere, recheck_env
        )
        finish(recheck, "gym eval health-check", recheck_log)
        rechecked_verdicts = read_jsonl(verdicts_path)
        log(f"aggregated and re-checked after {time.monotonic() - started_at:.0f}s")

        # The checks: the merged rollouts, their dispatches (shards) and verifies (servers).
        results = read_jsonl(out / "rollouts.jsonl")
        materialized = [
            row for number in range(SHARDS) for row in read_jsonl(out / f"rollouts-rs{number}-chunk0_materialized_inputs.jsonl")
        ]
        rollouts = checks.join_rollouts(materialized, results, report)
        result.rollouts = len(rollouts)
        report.check(len(rollouts) == len(tasks) * repeats, f"{len(rollouts)} merged rollouts for {len(tasks)} tasks x {repeats}")

        def received(*names: str) -> Received:
            spans = [span for name in names for span in read_received(receivers[name]).spans]
            return Received(spans, [])

        def arrived() -> bool:
            names = [s.name for s in received("aggregate", "health-check").spans]
            calls = sum(1 for s in received("servers").spans if checks.is_model_call(s))
            return names.count(checks.HEALTH_SPAN) >= 2 * len(rollouts) and calls >= len(read_jsonl(model_requests_path))

        try:
            wait_for("both passes' health spans at their receivers", arrived, TIMEOUT_SPANS, interval=1)
        except E2EFailure as error:
            report.notes.append(str(error))
        processes.interrupt(env_start, timeout=20)
        collected = received("shard-0", "shard-1", "servers")
        dispatches = checks.check_gym_spans(rollouts, collected, report)
        checks.check_model_calls(rollouts, collected, read_jsonl(model_requests_path), dispatches, report)
        checks.check_dispatch_totals(rollouts, dispatches, report)
        for name, verdicts in (("aggregate", aggregated_verdicts), ("health-check", rechecked_verdicts)):
            before = len(report.failures)
            checks.check_health_spans(rollouts, verdicts, dispatches, received(name), frozenset({"healthy", "unhealthy"}), report)
            report.failures[before:] = [f"{name}: {failure}" for failure in report.failures[before:]]
        orphans = [
            s.span_id
            for s in received("aggregate", "health-check").spans
            if s.name == checks.HEALTH_SPAN and s.parent_span_id not in {d.span_id for d in dispatches.values()}
        ]
        report.check(not orphans, f"{len(orphans)} health spans whose parent is no dispatch: {orphans[:5]}")
        report.notes.append(f"sharded flow took {time.monotonic() - started_at:.0f}s")
        return result
    except E2EFailure as error:
        report.fail(str(error))
        return result
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of this run still alive after stopping: {survivors}")
        for entry in scratch.ray_tmp.iterdir():
            shutil.rmtree(entry, ignore_errors=True)
        log(f"{result.label}: done in {time.monotonic() - started_at:.0f}s; logs in {work}")
