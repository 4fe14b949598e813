#!/usr/bin/env python3
"""End-to-end test of gym_instrument's inspect-ai preset against the released inspect-ai 0.3.285.

From nothing:
  1. builds `.venv-e2e-inspect` with the inspect-ai wheel from PyPI, the OpenTelemetry launcher,
     distro and OTLP/HTTP exporter, the `oteltap` OTLP receiver and this repository's package
     (editable); skipped when the venv's stamp matches;
  2. starts `oteltap` on 127.0.0.1;
  3. runs a real evaluation (e2e/inspect/eval_task.py: mock model, the `includes` letter scorer,
     4 samples x 2 epochs, one sample whose solver raises, `fail_on_error=False`) under
     `opentelemetry-instrument` with no OTEL_PYTHON_GYM_* at all (the default presets only);
  4. checks what the receiver got against inspect's own log (its `EvalLog` samples, read back with
     `read_eval_log`), sample-epoch by sample-epoch, and that `gym-instrument report` reads it.

Usage, from the repository's root (``-m`` puts the root on the path for ``gym_harness``):
    python3 -m e2e.run_inspect

Runs on any Python 3.9+ with the standard library (inspect-ai itself needs 3.10+); logs of the
last run stay in `.e2e-work/inspect/`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from e2e.checks import DISPATCH_SPAN, REPEAT, REWARD, ROLLOUT_ID, TASK_ID, VERIFY_SPAN, Report, rewarded_counter_total
from gym_harness.framework_venv import FrameworkVenv
from gym_harness.otlp_json import Received, read_received
from gym_harness.paths import E2E_DIR, REPO
from gym_harness.processes import (
    E2EFailure,
    Processes,
    await_arrival,
    free_port,
    log,
    run_main,
    tail,
)

WORK = REPO / ".e2e-work" / "inspect"
VENV = REPO / ".venv-e2e-inspect"
REQUIREMENTS = E2E_DIR / "requirements-inspect.txt"
FRAMEWORK_VENV = FrameworkVenv("inspect-ai 0.3.285", VENV, REQUIREMENTS, (3, 10), "E2E_PYTHON_INSPECT")
EVAL_TASK = E2E_DIR / "inspect" / "eval_task.py"

FRAMEWORK = "nemo.gym.framework"
ERROR_TYPE = "error.type"
ATTEMPT = "nemo.gym.rollout.attempt"
NUM_SAMPLES = 4
NUM_EPOCHS = 2
LETTERS = {"C": 1.0, "I": 0.0}  # what includes() scores, as inspect's value_to_float() maps them
TIMEOUT_EVAL = 300
TIMEOUT_SPANS = 60

# Read inspect's own log in the e2e venv: per sample-epoch, what the spans are checked against.
READ_LOG = """
import json, sys
from inspect_ai.log import list_eval_logs, read_eval_log
(info,) = list_eval_logs(sys.argv[1])
log = read_eval_log(info)
print(json.dumps([
    {"id": s.id, "epoch": s.epoch, "uuid": s.uuid, "error": s.error is not None,
     "value": next(iter(s.scores.values())).value if s.scores else None}
    for s in log.samples
]))
"""


def run_env(marker: str, receiver_port: int) -> dict[str, str]:
    return FRAMEWORK_VENV.run_env(marker, receiver_port, "inspect-e2e", WORK / "tmp")


def check_samples(samples: list[dict], received: Received, report: Report) -> dict[str, int]:
    """Per sample-epoch of inspect's log: one dispatch, one verify in its trace (see the module)."""
    dispatches = [span for span in received.spans if span.name == DISPATCH_SPAN]
    verifies = [span for span in received.spans if span.name == VERIFY_SPAN]
    report.spans_checked.update({DISPATCH_SPAN: len(dispatches), VERIFY_SPAN: len(verifies)})
    report.check(len(dispatches) == len(samples), f"{len(dispatches)} dispatch spans for {len(samples)} sample-epochs")
    report.check(len(verifies) == len(samples), f"{len(verifies)} verify spans for {len(samples)} sample-epochs")
    by_rollout: dict[tuple[str, object], list] = {}
    for span in (*dispatches, *verifies):
        by_rollout.setdefault((span.name, span.attributes.get(ROLLOUT_ID)), []).append(span)
    figures = {"sample-epochs": len(samples), "errored": 0, "rewarded": 0}
    for sample in samples:
        label = f"sample {sample['id']!r} epoch {sample['epoch']} ({sample['uuid']})"
        found = by_rollout.get((DISPATCH_SPAN, sample["uuid"]), [])
        if not report.check(len(found) == 1, f"{label}: {len(found)} dispatch spans with its rollout id"):
            continue
        dispatch = found[0]
        attributes = dispatch.attributes
        report.check(attributes.get(TASK_ID) == str(sample["id"]), f"{label}: task id {attributes.get(TASK_ID)!r}")
        report.check(attributes.get(REPEAT) == sample["epoch"] - 1, f"{label}: repeat {attributes.get(REPEAT)!r}")
        report.check(attributes.get(ATTEMPT) == 0, f"{label}: attempt {attributes.get(ATTEMPT)!r}")
        report.check(attributes.get(FRAMEWORK) == "inspect_ai", f"{label}: {FRAMEWORK}={attributes.get(FRAMEWORK)!r}")
        report.check(dispatch.parent_span_id == "", f"{label}: the dispatch span has a parent")
        found = by_rollout.get((VERIFY_SPAN, sample["uuid"]), [])
        if not report.check(len(found) == 1, f"{label}: {len(found)} verify spans with its rollout id"):
            continue
        verify = found[0]
        report.check(
            (verify.trace_id, verify.parent_span_id) == (dispatch.trace_id, dispatch.span_id),
            f"{label}: the verify span is not a child of its dispatch span",
        )
        for span in (dispatch, verify):
            if sample["error"]:
                report.check(span.status == "ERROR", f"{label}: an errored sample's {span.name} status is {span.status}")
                report.check(span.attributes.get(ERROR_TYPE) == "_OTHER", f"{label}: {span.name} error.type")
            else:
                report.check(span.status == "UNSET", f"{label}: {span.name} status {span.status}")
        reward = verify.attributes.get(REWARD)
        expected = LETTERS.get(sample["value"]) if sample["value"] is not None else None
        report.check(reward == expected, f"{label}: reward {reward!r} for the score {sample['value']!r}")
        figures["errored"] += sample["error"]
        figures["rewarded"] += reward is not None
    report.check(figures["errored"] == NUM_EPOCHS, f"{figures['errored']} errored sample-epochs, expected {NUM_EPOCHS}")
    report.check({s["value"] for s in samples} >= {"C", "I"}, f"scores {sorted({str(s['value']) for s in samples})}")
    total = rewarded_counter_total(received, report)
    report.check(total == figures["rewarded"], f"gym.rollout.rewarded_total adds up to {total}, {figures['rewarded']} rewarded")
    return figures


def check_report(spans_path: Path, samples: list[dict], report: Report) -> None:
    """The package's own report reads inspect's spans as it reads NeMo Gym's: same attribute names."""
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
        "tasks": NUM_SAMPLES,
        "dispatches": len(samples),
        "errors": sum(1 for sample in samples if sample["error"]),
        "scored": sum(1 for sample in samples if sample["value"] is not None),
        "rollouts_without_dispatch": 0,
    }
    seen = {key: run.get(key) for key in expected}
    report.check(seen == expected, f"gym-instrument report's run figures {seen}, expected {expected}")
    report.notes.append(f"gym-instrument report: {seen}")


def run() -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "tmp").mkdir(parents=True)
    venv_python = FRAMEWORK_VENV.ensure(WORK.parent / "pip-install-inspect.log")
    marker = uuid.uuid4().hex
    receiver_port = free_port()
    env = run_env(marker, receiver_port)
    processes = Processes(env)
    report = Report()
    spans_path, eval_log, log_dir = WORK / "received.ndjson", WORK / "eval.log", WORK / "logs"
    figures: dict[str, int] = {}
    try:
        FRAMEWORK_VENV.start_receiver(processes, receiver_port, spans_path, WORK, env)
        eval_started = time.monotonic()
        evaluation = processes.start(
            "inspect eval",
            [str(VENV / "bin" / "opentelemetry-instrument"), "--", str(venv_python), str(EVAL_TASK), str(log_dir)],
            eval_log,
            WORK,
        )
        try:
            evaluation.wait(timeout=TIMEOUT_EVAL)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"the evaluation did not finish in {TIMEOUT_EVAL}s; log: {eval_log}\n{tail(eval_log)}") from None
        if evaluation.returncode != 0:
            raise E2EFailure(f"the evaluation failed (exit {evaluation.returncode}); log: {eval_log}\n{tail(eval_log)}")
        log(f"the evaluation finished in {time.monotonic() - eval_started:.0f}s")
        read = subprocess.run([str(venv_python), "-c", READ_LOG, str(log_dir)], capture_output=True, text=True, timeout=120)
        if read.returncode != 0:
            raise E2EFailure(f"reading inspect's log failed: {read.stderr[-2000:]}")
        samples = json.loads(read.stdout)
        report.check(len(samples) == NUM_SAMPLES * NUM_EPOCHS, f"inspect's log has {len(samples)} sample-epochs")

        def arrived() -> bool:
            received = read_received(spans_path)
            names = [span.name for span in received.spans]
            return names.count(VERIFY_SPAN) >= len(samples) and rewarded_counter_total(received, Report()) is not None

        await_arrival("every sample-epoch's spans at the receiver", arrived, TIMEOUT_SPANS, report.notes)
        figures = check_samples(samples, read_received(spans_path), report)
        check_report(spans_path, samples, report)
    except E2EFailure as error:
        report.fail(str(error))
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of this run still alive after stopping: {survivors}")
    return report.conclude("inspect-ai 0.3.285", figures, time.monotonic() - started_at, WORK)


def main() -> int:
    return run_main(run)


if __name__ == "__main__":
    sys.exit(main())
