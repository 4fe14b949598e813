#!/usr/bin/env python3
"""End-to-end test of a generate-then-score loop, traced by a configuration file alone.

The loop (e2e/score_after/, no telemetry code) takes 5 tasks from reasoning-gym's datasets,
generates every rollout first (2 repeats each, a scripted "model": no GPU), then scores the whole
batch with two reward functions in TRL's signature, ``f(prompts, completions, **columns) ->
list[float]``, one over reasoning-gym's own ``score_answer``, and judges the rollouts with its own
records (task id and repeat, no rollout id). e2e/score_after/gym.toml is all the tracing there is.

From nothing:
  1. builds `.venv-e2e-score-after` with reasoning-gym from PyPI, the OpenTelemetry launcher,
     distro and OTLP/HTTP exporter, the `oteltap` OTLP receiver and this repository's package
     (editable); skipped when the venv's stamp matches;
  2. starts `oteltap` on 127.0.0.1 and runs the loop under `opentelemetry-instrument` with
     OTEL_PYTHON_GYM_CONFIG=e2e/score_after/gym.toml;
  3. checks, rollout by rollout against what the loop saw: one dispatch (task id, repeat, rollout
     id); per reward function, one verify in its dispatch's trace, a child of it, named by the
     function, with that function's reward; one health child with the verdict and sorted checks;
     and that `gym-instrument report` gives each task the loop's own reward (the functions' sum).

Usage, from the repository's root: python3 -m e2e.run_score_after
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from e2e.checks import Report
from gym_harness.framework_venv import FrameworkVenv
from gym_harness.otlp_json import Span, read_received
from gym_harness.paths import E2E_DIR, REPO
from gym_harness.processes import E2EFailure, Processes, await_arrival, free_port, run_main, tail

WORK = REPO / ".e2e-work" / "score_after"
VENV = REPO / ".venv-e2e-score-after"
LOOP_DIR = E2E_DIR / "score_after"
FRAMEWORK_VENV = FrameworkVenv(
    "reasoning-gym 0.1.25", VENV, E2E_DIR / "requirements-score-after.txt", (3, 10), "E2E_PYTHON_SCORE_AFTER"
)
DISPATCH, VERIFY, HEALTH = "gym.rollout.dispatch", "gym.verify", "gym.rollout.health"
FUNCTIONS = ("accuracy_reward", "format_reward")
ROLLOUTS = 10
TIMEOUT_LOOP = 180
TIMEOUT_SPANS = 60


def check_rollouts(seen: dict[str, Any], spans: list[Span], report: Report) -> dict[str, int]:
    by_name: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_name[span.name].append(span)
    dispatches: dict[str, list[Span]] = defaultdict(list)
    for span in by_name[DISPATCH]:
        dispatches[str(span.attributes.get("nemo.gym.rollout.id"))].append(span)
    children: dict[str, list[Span]] = defaultdict(list)
    for span in by_name[VERIFY] + by_name[HEALTH]:
        children[span.parent_span_id].append(span)
    verdicts = {(verdict["task_id"], verdict["repeat"]): verdict for verdict in seen["verdicts"]}
    for rollout in seen["rollouts"]:
        rollout_id = f"{rollout['task_id']}-r{rollout['repeat']}"
        found = dispatches.pop(rollout_id, [])
        if not report.check(len(found) == 1, f"{rollout_id}: {len(found)} dispatch spans, expected 1"):
            continue
        (dispatch,) = found
        attributes = dispatch.attributes
        report.check(
            (attributes.get("nemo.gym.task.id"), attributes.get("nemo.gym.rollout.repeat"))
            == (rollout["task_id"], rollout["repeat"]),
            f"{rollout_id}: dispatch names {attributes}",
        )
        kids = children[dispatch.span_id]
        verifies = [span for span in kids if span.name == VERIFY]
        for function in FUNCTIONS:
            own = [span for span in verifies if span.attributes.get("nemo.gym.verify.function") == function]
            if not report.check(len(own) == 1, f"{rollout_id}: {len(own)} verify spans of {function} under its dispatch"):
                continue
            (verify,) = own
            report.check(
                verify.trace_id == dispatch.trace_id and verify.attributes.get("nemo.gym.rollout.id") == rollout_id,
                f"{rollout_id}: {function}'s verify names {verify.attributes.get('nemo.gym.rollout.id')!r} in another trace",
            )
            report.check(
                verify.attributes.get("nemo.gym.rollout.reward") == rollout["rewards"][function],
                f"{rollout_id}: {function}'s verify reward {verify.attributes.get('nemo.gym.rollout.reward')},"
                f" the loop's {rollout['rewards'][function]}",
            )
            report.check(
                verify.start_ns >= dispatch.end_ns, f"{rollout_id}: {function}'s verify started before its dispatch ended"
            )
        report.check(len(verifies) == len(FUNCTIONS), f"{rollout_id}: {len(verifies)} verify spans, expected {len(FUNCTIONS)}")
        health = [span for span in kids if span.name == HEALTH]
        verdict = verdicts[(rollout["task_id"], rollout["repeat"])]
        expected = ("healthy" if verdict["verdict"] else "unhealthy", sorted(verdict["checks"]))
        got = [
            (span.attributes.get("nemo.gym.health.verdict"), span.attributes.get("nemo.gym.health.checks") or [])
            for span in health
        ]
        report.check(got == [expected], f"{rollout_id}: health children {got}, expected [{expected}]")
    report.check(not dispatches, f"dispatch spans of no rollout: {sorted(dispatches)}")
    report.check(
        len(by_name[VERIFY]) == len(FUNCTIONS) * len(seen["rollouts"]),
        f"{len(by_name[VERIFY])} verify spans in all, expected one per rollout per reward function",
    )
    return {
        "rollouts": len(seen["rollouts"]),
        "dispatch spans": len(by_name[DISPATCH]),
        "verify spans": len(by_name[VERIFY]),
        "health spans": len(by_name[HEALTH]),
    }


def check_report(spans_path: Path, seen: dict[str, Any], report: Report) -> None:
    """gym-instrument report scores each rollout once, by its verifies' declared rule (sum)."""
    spans = [json.loads(line) for line in spans_path.read_text(errors="replace").splitlines() if '"spanId"' in line]
    document = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "gym_instrument"}, "spans": spans}]}]}
    otlp_file = WORK / "spans.otlp.json"
    otlp_file.write_text(json.dumps(document) + "\n")
    command = [str(VENV / "bin" / "gym-instrument"), "report", str(otlp_file), "--format", "json", "--no-html"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if not report.check(result.returncode == 0, f"gym-instrument report exited {result.returncode}: {result.stderr[-2000:]}"):
        return
    figures = json.loads(result.stdout)
    rewards: dict[str, list[float]] = defaultdict(list)
    for rollout in seen["rollouts"]:
        rewards[rollout["task_id"]].append(rollout["reward"])
    got = {task["task"]: task["mean_reward"] for task in figures["tasks"]}
    expected = {task: sum(values) / len(values) for task, values in rewards.items()}
    report.check(
        got.keys() == expected.keys() and all(abs(got[task] - expected[task]) < 1e-9 for task in expected),
        f"report's per-task reward {got}, the loop's {expected}",
    )
    run = figures["run"]
    report.check(run.get("scored") == len(seen["rollouts"]), f"report's scored rollouts {run.get('scored')}")
    report.check(
        run.get("rollouts_without_dispatch") == 0, f"report's rollouts without dispatch {run.get('rollouts_without_dispatch')}"
    )
    report.notes.append(f"gym-instrument report: per-task reward {got}")


def run() -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "tmp").mkdir(parents=True)
    venv_python = FRAMEWORK_VENV.ensure(WORK.parent / "pip-install-score-after.log")
    marker = uuid.uuid4().hex
    receiver_port = free_port()
    env = FRAMEWORK_VENV.run_env(
        marker, receiver_port, "score-after-loop", WORK / "tmp", {"OTEL_PYTHON_GYM_CONFIG": str(LOOP_DIR / "gym.toml")}
    )
    processes = Processes(env)
    report = Report()
    spans_path, loop_log, seen_path = WORK / "received.ndjson", WORK / "loop.log", WORK / "seen.json"
    figures: dict[str, int] = {}
    try:
        FRAMEWORK_VENV.start_receiver(processes, receiver_port, spans_path, WORK, env)
        loop = processes.start(
            "the loop",
            [str(VENV / "bin" / "opentelemetry-instrument"), "--", str(venv_python), str(LOOP_DIR / "main.py"), str(seen_path)],
            loop_log,
            LOOP_DIR,
        )
        try:
            loop.wait(timeout=TIMEOUT_LOOP)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"the loop did not finish in {TIMEOUT_LOOP}s; log: {loop_log}\n{tail(loop_log)}") from None
        if loop.returncode != 0:
            raise E2EFailure(f"the loop failed (exit {loop.returncode}); log: {loop_log}\n{tail(loop_log)}")
        seen = json.loads(seen_path.read_text())
        report.check(len(seen["rollouts"]) == ROLLOUTS, f"the loop generated {len(seen['rollouts'])} rollouts")
        logged = loop_log.read_text(errors="replace")
        report.check("gym_instrument" not in logged, f"the loop logged about the package: {tail(loop_log)}")

        def arrived() -> bool:
            names = [span.name for span in read_received(spans_path).spans]
            return names.count(VERIFY) >= len(FUNCTIONS) * ROLLOUTS and names.count(HEALTH) >= ROLLOUTS

        await_arrival("every rollout's spans at the receiver", arrived, TIMEOUT_SPANS, report.notes)
        figures = check_rollouts(seen, read_received(spans_path).spans, report)
        check_report(spans_path, seen, report)
    except E2EFailure as error:
        report.fail(str(error))
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of this run still alive after stopping: {survivors}")
    return report.conclude("reasoning-gym 0.1.25 / a generate-then-score loop", figures, time.monotonic() - started_at, WORK)


def main() -> int:
    return run_main(run)


if __name__ == "__main__":
    sys.exit(main())
