#!/usr/bin/env python3
"""End-to-end test of an environment behind a WebSocket session: OpenEnv, traced by configuration alone.

An environment of our own (e2e/openenv/guess_env.py: guess a number, a reward every step, a step
that raises in the server) is served by openenv-core's ``create_app`` under uvicorn; a user's loop
(e2e/openenv/guess_loop.py, main.py; no telemetry code) plays 5 tasks x 2 repeats through its
``EnvClient``, four WebSocket sessions at a time, and judges its episodes with its own verdict
records. Both processes run under ``opentelemetry-instrument`` and read one configuration file.

From nothing:
  1. builds `.venv-e2e-openenv` with openenv-core from PyPI (e2e/requirements-openenv.txt), the
     OpenTelemetry launcher, distro and OTLP/HTTP exporter, the `oteltap` OTLP receiver and this
     repository's package (editable); skipped when the venv's stamp matches;
  2. twice, once per configuration: the verify on the server's ``Environment.step``
     (verify-on-server.toml), then on the client's ``EnvClient.step`` (verify-on-client.toml). Each
     pass starts `oteltap` and the server on 127.0.0.1, runs the loop, then stops the server with
     SIGTERM: its batch processor holds every span until then (a 10-minute schedule), so what
     arrives was flushed by the signal;
  3. checks, episode by episode against what the loop saw: one dispatch (task id, repeat, rollout
     id; failed when the episode raised), one verify per step, each a child of its episode's
     dispatch with its rollout id and the step's reward; the step that raised in the server fails
     its verify with the server's exception type (server pass) or the client's ``RuntimeError``
     (client pass); one health child per episode with the verdict and its checks; no other span.

Usage, from the repository's root: python3 -m e2e.run_openenv
"""

from __future__ import annotations

import json
import shutil
import signal
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
from gym_harness.processes import E2EFailure, Processes, await_arrival, exited, free_port, port_open, run_main, tail, wait_for

WORK = REPO / ".e2e-work" / "openenv"
VENV = REPO / ".venv-e2e-openenv"
LOOP_DIR = E2E_DIR / "openenv"
FRAMEWORK_VENV = FrameworkVenv("openenv-core 0.3.0", VENV, E2E_DIR / "requirements-openenv.txt", (3, 10), "E2E_PYTHON_OPENENV")
DISPATCH, VERIFY, HEALTH = "gym.rollout.dispatch", "gym.verify", "gym.rollout.health"
SESSION_SPAN = "WS /ws"  # FastAPI's own server span of a WebSocket session (FastAPI 0.165 and later)
# The verify's side, its configuration, and the error.type of the step that raised in the server, as that side sees it.
PASSES = {
    "server": ("verify-on-server.toml", "guess_env.OffTheBoard"),
    "client": ("verify-on-client.toml", "RuntimeError"),
}
EPISODES = 10
TIMEOUT_LOOP = 120
TIMEOUT_SERVER = 60
TIMEOUT_SPANS = 60
HELD = "600000"  # the server's OTEL_BSP_SCHEDULE_DELAY (ms): nothing leaves it before SIGTERM


def is_fastapis(span: Span) -> bool:
    """A span of FastAPI's own telemetry (0.165 and later): the session's server span, its operation spans."""
    return (span.kind == "SERVER" and span.name == SESSION_SPAN) or span.name.startswith("fastapi.")


def check_episodes(seen: dict[str, Any], spans: list[Span], raised_as: str, report: Report) -> dict[str, int]:
    by_name: dict[str, list[Span]] = defaultdict(list)
    by_id = {span.span_id: span for span in spans}
    for span in spans:
        by_name[span.name].append(span)
    others = sorted({span.name for span in spans if span.name not in (DISPATCH, VERIFY, HEALTH) and not is_fastapis(span)})
    report.check(not others, f"spans neither configured nor FastAPI's own: {others}")

    def dispatch_of(span: Span) -> Span | None:
        """The dispatch above ``span``, through FastAPI's own spans only (None: another span, or a root)."""
        parent = by_id.get(span.parent_span_id)
        while parent is not None and is_fastapis(parent):
            parent = by_id.get(parent.parent_span_id)
        return parent if parent is not None and parent.name == DISPATCH else None

    dispatches: dict[str, list[Span]] = defaultdict(list)
    for span in by_name[DISPATCH]:
        dispatches[str(span.attributes.get("nemo.gym.rollout.id"))].append(span)
    children: dict[str, list[Span]] = defaultdict(list)
    for span in by_name[VERIFY] + by_name[HEALTH] + by_name[SESSION_SPAN]:
        dispatch = dispatch_of(span)
        children[dispatch.span_id if dispatch else "none"].append(span)
    verdicts = {(verdict["task_id"], verdict["repeat"]): verdict for verdict in seen["verdicts"]}
    steps_seen = 0
    for result in seen["results"]:
        rollout_id = f"{result['task_id']}-r{result['repeat']}"
        found = dispatches.pop(rollout_id, [])
        if not report.check(len(found) == 1, f"{rollout_id}: {len(found)} dispatch spans, expected 1"):
            continue
        (dispatch,) = found
        attributes = dispatch.attributes
        report.check(
            (attributes.get("nemo.gym.task.id"), attributes.get("nemo.gym.rollout.repeat"))
            == (result["task_id"], result["repeat"]),
            f"{rollout_id}: dispatch names {attributes}",
        )
        failed = "error" in result
        report.check((dispatch.status == "ERROR") == failed, f"{rollout_id}: dispatch status {dispatch.status}, raised: {failed}")
        kids = children[dispatch.span_id]
        sessions = [span for span in kids if span.name == SESSION_SPAN]
        report.check(
            all(span.parent_span_id == dispatch.span_id for span in sessions) and len(sessions) <= 1,
            f"{rollout_id}: FastAPI's session spans {[(span.span_id, span.parent_span_id) for span in sessions]}",
        )
        steps = sorted((span for span in kids if span.name == VERIFY), key=lambda span: span.start_ns)
        steps_seen += len(result["rewards"]) + failed
        for step in steps:
            report.check(
                step.trace_id == dispatch.trace_id and step.attributes.get("nemo.gym.rollout.id") == rollout_id,
                f"{rollout_id}: a verify span names {step.attributes.get('nemo.gym.rollout.id')!r}",
            )
        scored = [step for step in steps if step.status != "ERROR"]
        rewards = [step.attributes.get("nemo.gym.rollout.reward") for step in scored]
        report.check(
            rewards == result["rewards"], f"{rollout_id}: verify rewards {rewards}, the loop's steps {result['rewards']}"
        )
        raising = [(step.status, step.attributes.get("error.type")) for step in steps if step not in scored]
        expected = [("ERROR", raised_as)] if failed else []
        report.check(raising == expected, f"{rollout_id}: failed verifies {raising}, expected {expected}")
        if failed and steps:
            report.check(steps[-1].status == "ERROR", f"{rollout_id}: the raising step is not its last verify")
        health = [span for span in kids if span.name == HEALTH]
        report.check(
            all(span.parent_span_id == dispatch.span_id for span in health), f"{rollout_id}: a health span not its child"
        )
        verdict = verdicts[(result["task_id"], result["repeat"])]
        want = ("healthy" if verdict["verdict"] == "ok" else "unhealthy", sorted(verdict["problems"]))
        got = [
            (span.attributes.get("nemo.gym.health.verdict"), span.attributes.get("nemo.gym.health.checks") or [])
            for span in health
        ]
        report.check(got == [want], f"{rollout_id}: health children {got}, expected [{want}]")
    report.check(not dispatches, f"dispatch spans of no episode: {sorted(dispatches)}")
    # Every verify is under a dispatch: none is a root, none in another trace.
    report.check(not children["none"], f"spans under no dispatch: {[(span.name, span.span_id) for span in children['none']]}")
    report.check(len(by_name[VERIFY]) == steps_seen, f"{len(by_name[VERIFY])} verify spans, the loop made {steps_seen} steps")
    return {
        "dispatch spans": len(by_name[DISPATCH]),
        "verify spans": len(by_name[VERIFY]),
        "health spans": len(by_name[HEALTH]),
        "FastAPI session spans": len(by_name[SESSION_SPAN]),
    }


def run_pass(side: str, venv_python: Path, marker: str, report: Report) -> dict[str, int]:
    """One configuration: receiver, server, loop, SIGTERM to the server, checks. The figures it saw."""
    config, raised_as = PASSES[side]
    work = WORK / side
    (work / "tmp").mkdir(parents=True)
    receiver_port, server_port = free_port(), free_port()
    extra = {"OTEL_PYTHON_GYM_CONFIG": str(LOOP_DIR / config)}
    client_env = FRAMEWORK_VENV.run_env(marker, receiver_port, "openenv-loop", work / "tmp", extra)
    server_env = FRAMEWORK_VENV.run_env(
        marker, receiver_port, "openenv-server", work / "tmp", {**extra, "OTEL_BSP_SCHEDULE_DELAY": HELD}
    )
    processes = Processes(client_env)
    spans_path, seen_path = work / "received.ndjson", work / "seen.json"
    server_log, loop_log = work / "server.log", work / "loop.log"
    launcher = str(VENV / "bin" / "opentelemetry-instrument")
    try:
        FRAMEWORK_VENV.start_receiver(processes, receiver_port, spans_path, work, client_env)
        server = processes.start(
            f"the server ({side} pass)",
            [
                launcher,
                "--",
                str(venv_python),
                "-m",
                "uvicorn",
                "guess_server:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(server_port),
            ],
            server_log,
            LOOP_DIR,
            server_env,
        )
        wait_for(
            f"the server on 127.0.0.1:{server_port}",
            lambda: port_open(server_port),
            TIMEOUT_SERVER,
            exited(server, "the server", server_log),
        )
        loop = processes.start(
            f"the loop ({side} pass)",
            [launcher, "--", str(venv_python), str(LOOP_DIR / "main.py"), f"http://127.0.0.1:{server_port}", str(seen_path)],
            loop_log,
            LOOP_DIR,
        )
        try:
            loop.wait(timeout=TIMEOUT_LOOP)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"the loop did not finish in {TIMEOUT_LOOP}s; log: {loop_log}\n{tail(loop_log)}") from None
        if loop.returncode != 0:
            raise E2EFailure(f"the loop failed (exit {loop.returncode}); log: {loop_log}\n{tail(loop_log)}")
        # How Slurm and Kubernetes stop a server: SIGTERM, then its spans must all arrive.
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=TIMEOUT_SERVER)
        except subprocess.TimeoutExpired:
            raise E2EFailure(f"the server did not stop on SIGTERM in {TIMEOUT_SERVER}s; log: {server_log}") from None
        report.check(
            server.returncode in (0, -signal.SIGTERM),
            f"the server ended with {server.returncode} on SIGTERM; log: {server_log}\n{tail(server_log)}",
        )
        seen = json.loads(seen_path.read_text())
        report.check(len(seen["results"]) == EPISODES, f"the loop ran {len(seen['results'])} episodes")
        steps = sum(len(result["rewards"]) + ("error" in result) for result in seen["results"])

        def arrived() -> bool:
            names = [span.name for span in read_received(spans_path).spans]
            return names.count(HEALTH) >= EPISODES and names.count(VERIFY) >= steps

        await_arrival(f"every span of the {side} pass at the receiver", arrived, TIMEOUT_SPANS, report.notes)
        figures = check_episodes(seen, read_received(spans_path).spans, raised_as, report)
        if side == "server":
            report.notes.append(f"server pass: {figures['verify spans']} verify spans from the server, all sent on SIGTERM")
        return {f"{name} ({side})": value for name, value in figures.items()}
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of the {side} pass still alive after stopping: {survivors}")


def run() -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    venv_python = FRAMEWORK_VENV.ensure(WORK.parent / "pip-install-openenv.log")
    marker = uuid.uuid4().hex
    report = Report()
    figures: dict[str, int] = {}
    for side in PASSES:
        prefix = f"{side} pass: "
        failures_before = len(report.failures)
        try:
            figures.update(run_pass(side, venv_python, marker, report))
        except E2EFailure as error:
            report.fail(str(error))
        report.failures[failures_before:] = [prefix + failure for failure in report.failures[failures_before:]]
    return report.conclude("openenv-core 0.3.0 / a WebSocket session per episode", figures, time.monotonic() - started_at, WORK)


def main() -> int:
    return run_main(run)


if __name__ == "__main__":
    sys.exit(main())
