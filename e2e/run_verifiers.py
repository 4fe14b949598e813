#!/usr/bin/env python3
"""End-to-end test of gym_instrument's verifiers preset against the released verifiers 0.4.0.

From nothing:
  1. builds `.venv-e2e-verifiers` (Python 3.11+) with the verifiers wheel from PyPI, uv (vf-eval's
     harness runs `uv sync --script`), the OpenTelemetry launcher, distro and OTLP/HTTP exporter,
     the `oteltap` OTLP receiver and this repository's package (editable); skipped when the
     venv's stamp matches;
  2. starts `oteltap` and the scripted model server (gym_harness/model_server.py) on 127.0.0.1;
  3. runs the real `vf-eval` under `opentelemetry-instrument` with no OTEL_PYTHON_GYM_TARGETS
     (the default presets only) on the taskset in e2e/verifiers/ (5 tasks x 3 repeats: string
     ids, a task named only by its name, one with neither, one whose first model call fails);
  4. checks what the receiver got against vf-eval's own traces.jsonl, episode by episode.

Usage, from the repository's root (``-m`` puts the root on the path for ``gym_harness``):
    python3 -m e2e.run_verifiers            # the run and its checks
    python3 -m e2e.run_verifiers --repeats 4

Runs on any Python 3.9+ with the standard library; logs of the last run stay in
`.e2e-work/verifiers/`.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from e2e.checks import (
    DISPATCH_SPAN,
    REWARD,
    ROLLOUT_ID,
    TASK_ID,
    TASK_INDEX,
    VERIFY_SPAN,
    Report,
    _ancestry,
    rewarded_counter_total,
)
from gym_harness.framework_venv import FrameworkVenv
from gym_harness.otlp_json import Received, Span, read_received
from gym_harness.paths import E2E_DIR, MODEL_SERVER, REPO
from gym_harness.processes import (
    E2EFailure,
    Processes,
    await_arrival,
    exited,
    free_port,
    log,
    run_main,
    tail,
    wait_for,
)

WORK = REPO / ".e2e-work" / "verifiers"
VENV = REPO / ".venv-e2e-verifiers"
REQUIREMENTS = E2E_DIR / "requirements-verifiers.txt"
FRAMEWORK_VENV = FrameworkVenv("verifiers 0.4.0", VENV, REQUIREMENTS, (3, 11), "E2E_PYTHON_VERIFIERS")
TASKSET_DIR = E2E_DIR / "verifiers"
TASKSET = "gym_e2e_taskset"
TASKS = TASKSET_DIR / TASKSET / "tasks.jsonl"

FRAMEWORK = "nemo.gym.framework"
ERROR_TYPE = "error.type"
REPEAT = "nemo.gym.rollout.repeat"
NUM_TASKS = 5
NUM_REPEATS = 3
TIMEOUT_EVAL = 300
TIMEOUT_SPANS = 60


def run_env(marker: str, receiver_port: int) -> dict[str, str]:
    return FRAMEWORK_VENV.run_env(
        marker,
        receiver_port,
        "verifiers-e2e",
        WORK / "tmp",
        {"PYTHONPATH": str(TASKSET_DIR), "HF_HUB_OFFLINE": "1", "UV_CACHE_DIR": str(WORK / "uv-cache")},
    )


def read_episodes(output_dir: Path) -> list[dict]:
    found = sorted(output_dir.glob("*/traces.jsonl"))
    if len(found) != 1:
        raise E2EFailure(f"expected one traces.jsonl under {output_dir}, found {[str(p) for p in found]}")
    return [json.loads(line) for line in found[0].read_text().splitlines() if line.strip()]


def weighted_reward(trace: dict) -> float:
    return sum(r["score"] * r.get("weight", 1.0) for r in (trace.get("rewards") or {}).values() if r is not None)


def check_episodes(episodes: list[dict], received: Received, report: Report, repeats: int) -> dict[str, int]:
    """Per episode of traces.jsonl: its dispatch span, its verify span, its outcome (see e2e/README.md)."""
    spans_by_id = {span.span_id: span for span in received.spans}
    dispatches = [span for span in received.spans if span.name == DISPATCH_SPAN]
    verifies = [span for span in received.spans if span.name == VERIFY_SPAN]
    report.spans_checked.update({DISPATCH_SPAN: len(dispatches), VERIFY_SPAN: len(verifies)})
    scored = [episode for episode in episodes if episode["ok"]]
    report.check(len(dispatches) == len(episodes), f"{len(dispatches)} dispatch spans for {len(episodes)} episodes")
    report.check(len(verifies) == len(scored), f"{len(verifies)} verify spans for {len(scored)} scored episodes")

    def by_id(spans: list[Span]) -> dict[str, list[Span]]:
        grouped: dict[str, list[Span]] = {}
        for span in spans:
            grouped.setdefault(span.attributes.get(ROLLOUT_ID), []).append(span)
        return grouped

    dispatch_by_id, verify_by_id = by_id(dispatches), by_id(verifies)
    figures = {"episodes": len(episodes), "failed": 0, "without task id": 0}
    for episode in episodes:
        data = episode["task"]["data"]
        (trace,) = episode["traces"]  # one agent per episode in this taskset
        rollout_id = trace["id"]
        label = f"episode {episode['id']} (task idx {data['idx']}, trace {rollout_id})"
        found = dispatch_by_id.get(rollout_id, [])
        if not report.check(len(found) == 1, f"{label}: {len(found)} dispatch spans with {ROLLOUT_ID}={rollout_id!r}"):
            continue
        dispatch = found[0]
        attributes = dispatch.attributes
        expected_task_id = data.get("id") or data.get("name")
        if expected_task_id is None:
            figures["without task id"] += 1
        report.check(
            attributes.get(TASK_ID) == expected_task_id,
            f"{label}: task id {attributes.get(TASK_ID)!r}, expected {expected_task_id!r}",
        )
        report.check(attributes.get(TASK_INDEX) == data["idx"], f"{label}: task index {attributes.get(TASK_INDEX)!r}")
        report.check(attributes.get(FRAMEWORK) == "verifiers", f"{label}: {FRAMEWORK}={attributes.get(FRAMEWORK)!r}")
        report.check(REPEAT not in attributes, f"{label}: a repeat index that verifiers does not have")
        report.check(dispatch.parent_span_id == "", f"{label}: the dispatch span has a parent; each episode is its own trace")
        if episode["ok"]:
            report.check(dispatch.status == "UNSET", f"{label}: an ok episode's dispatch status is {dispatch.status}")
            report.check(ERROR_TYPE not in attributes, f"{label}: an ok episode's dispatch has error.type")
        else:
            figures["failed"] += 1
            errors = trace.get("errors") or episode.get("errors") or [{}]
            expected_type = errors[-1].get("type")
            report.check(dispatch.status == "ERROR", f"{label}: a failed episode's dispatch status is {dispatch.status}")
            report.check(
                attributes.get(ERROR_TYPE) == expected_type,
                f"{label}: error.type {attributes.get(ERROR_TYPE)!r}, file says {expected_type!r}",
            )
        found = verify_by_id.get(rollout_id, [])
        if not episode["ok"]:
            report.check(not found, f"{label}: a failed (unscored) episode has {len(found)} verify spans")
            continue
        if not report.check(len(found) == 1, f"{label}: {len(found)} verify spans with {ROLLOUT_ID}={rollout_id!r}"):
            continue
        verify = found[0]
        report.check(verify.trace_id == dispatch.trace_id, f"{label}: verify span in another trace than its dispatch")
        report.check(dispatch in _ancestry(verify, spans_by_id)[1:], f"{label}: verify span not below its dispatch span")
        reward = verify.attributes.get(REWARD)
        expected = weighted_reward(trace)
        report.check(
            isinstance(reward, float) and math.isclose(reward, expected, abs_tol=1e-9),
            f"{label}: verify reward {reward!r}, traces.jsonl's weighted reward {expected!r}",
        )
    trace_ids = [span.trace_id for span in dispatches]
    report.check(len(set(trace_ids)) == len(episodes), f"{len(set(trace_ids))} traces for {len(episodes)} episodes")
    stray = [span.name for span in received.spans if span.trace_id not in set(trace_ids) and span.name.startswith("gym.")]
    report.check(not stray, f"gym spans outside every episode's trace: {stray}")
    rewarded = sum(1 for span in verifies if REWARD in span.attributes)
    total = rewarded_counter_total(received, report)
    report.check(total == rewarded, f"gym.rollout.rewarded_total adds up to {total}, {rewarded} verify spans carry a reward")
    outcomes: dict[str, float] = {}
    for point in received.metric_points:
        if point.name == "gym.rollout.dispatches":
            outcome = str(point.attributes.get("outcome"))
            outcomes[outcome] = outcomes.get(outcome, 0) + (point.value or 0)
    expected_outcomes = {"ok": float(len(scored)), "error": float(figures["failed"])}
    report.check(outcomes == expected_outcomes, f"gym.rollout.dispatches by outcome {outcomes}, expected {expected_outcomes}")
    report.check(figures["failed"] == 1, f"the taskset makes exactly one failed episode, traces.jsonl has {figures['failed']}")
    # One task of the taskset has neither an id nor a name: each of its episodes has no task id.
    report.check(figures["without task id"] == repeats, f"{figures['without task id']} episodes without a task id")
    figures.update({"dispatch spans": len(dispatches), "verify spans": len(verifies), "rewarded_total": int(total or 0)})
    return figures


def check_report(spans_path: Path, episodes: list[dict], report: Report) -> None:
    """The package's own report reads verifiers' spans as it reads NeMo Gym's: same attribute names."""
    spans = [json.loads(line) for line in spans_path.read_text(errors="replace").splitlines() if '"spanId"' in line]
    document = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "gym_instrument"}, "spans": spans}]}]}
    otlp_file = WORK / "spans.otlp.json"
    otlp_file.write_text(json.dumps(document) + "\n")
    command = [str(VENV / "bin" / "gym-instrument"), "report", str(otlp_file), "--format", "json", "--no-html"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    # Exit code 4: the run's failed dispatches are over --max-infra-failures; the figures are checked below all the same.
    if not report.check(result.returncode in (0, 4), f"gym-instrument report failed: {result.stderr[-2000:]}"):
        return
    run = json.loads(result.stdout)["run"]
    expected = {
        "tasks": NUM_TASKS,
        "dispatches": len(episodes),
        "errors": sum(1 for episode in episodes if not episode["ok"]),
        "scored": sum(1 for episode in episodes if episode["ok"]),
        "rollouts_without_dispatch": 0,
    }
    seen = {key: run.get(key) for key in expected}
    report.check(seen == expected, f"gym-instrument report's run figures {seen}, expected {expected}")
    report.notes.append(f"gym-instrument report: {seen}")


def run(args: argparse.Namespace) -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "tmp").mkdir(parents=True)
    venv_python = FRAMEWORK_VENV.ensure(WORK.parent / "pip-install-verifiers.log")
    marker = uuid.uuid4().hex
    receiver_port = free_port()
    env = run_env(marker, receiver_port)
    processes = Processes(env)
    report = Report()
    spans_path, eval_log, output_dir = WORK / "received.ndjson", WORK / "vf_eval.log", WORK / "out"
    figures: dict[str, int] = {}
    try:
        FRAMEWORK_VENV.start_receiver(processes, receiver_port, spans_path, WORK, env)
        plain_env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        port_file, model_log = WORK / "model_server.port", WORK / "model_server.log"
        model = processes.start(
            "model server",
            [str(venv_python), str(MODEL_SERVER), "--answers", str(TASKS), "--port-file", str(port_file)],
            model_log,
            WORK,
            plain_env,
        )
        wait_for("the model server's port", port_file.exists, 30, exited(model, "model server", model_log))
        model_port = int(port_file.read_text())
        eval_started = time.monotonic()
        vf_eval = processes.start(
            "vf-eval",
            [
                str(VENV / "bin" / "opentelemetry-instrument"),
                "--",
                str(VENV / "bin" / "vf-eval"),
                TASKSET,
                "-n",
                str(NUM_TASKS),
                "-r",
                str(args.repeats),
                "-m",
                "scripted-model",
                "--client.base-url",
                f"http://127.0.0.1:{model_port}/v1",
                "--env.agent.harness.id",
                "null",
                "--env.agent.runtime.type",
                "subprocess",
                "--no-push",
                "--no-rich",
                "--output-dir",
                str(output_dir),
            ],
            eval_log,
            WORK,
        )
        try:
            vf_eval.wait(timeout=TIMEOUT_EVAL)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"vf-eval did not finish in {TIMEOUT_EVAL}s; log: {eval_log}\n{tail(eval_log)}") from None
        if vf_eval.returncode != 0:
            raise E2EFailure(f"vf-eval failed (exit {vf_eval.returncode}); log: {eval_log}\n{tail(eval_log)}")
        log(f"vf-eval finished in {time.monotonic() - eval_started:.0f}s")
        episodes = read_episodes(output_dir)
        report.check(len(episodes) == NUM_TASKS * args.repeats, f"traces.jsonl has {len(episodes)} episodes")

        def arrived() -> bool:
            received = read_received(spans_path)
            names = [span.name for span in received.spans]
            counter = rewarded_counter_total(received, Report())
            return names.count(DISPATCH_SPAN) >= len(episodes) and counter is not None

        await_arrival("every episode's spans at the receiver", arrived, TIMEOUT_SPANS, report.notes)
        figures = check_episodes(episodes, read_received(spans_path), report, args.repeats)
        check_report(spans_path, episodes, report)
    except E2EFailure as error:
        report.fail(str(error))
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of this run still alive after stopping: {survivors}")
    return report.conclude("verifiers 0.4.0 / vf-eval", figures, time.monotonic() - started_at, WORK)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=NUM_REPEATS, help=f"episodes per task (default {NUM_REPEATS})")
    args = parser.parse_args()
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
