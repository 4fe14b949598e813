"""Traces across real processes on 127.0.0.1: collector -> agent -> resources server, over HTTP,
all under ``opentelemetry-instrument``: with the aiohttp-client and FastAPI instrumentations
(``contrib``), or with them disabled and the package's own propagation (``own``: an ``inject``
target at the pipeline's one request function, the preset's ``receive`` boundary in uvicorn)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from gym_instrument import semconv
from tests.otlp_receiver import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = str(Path(sys.executable).parent / "opentelemetry-instrument")
MODULE = "tests.crossprocess.services"
TASKS, REPEATS = 3, 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The pipeline's one request function, whose requests carry the context (a no-op while contrib's client instrumentation is on).
INJECT = f"{MODULE}:request=inject@nemo_gym"
# FastAPI's own spans (0.165 and later): its server span ("POST /run") and its operation spans.
FASTAPI_NATIVE = ("POST ", "fastapi.")


def environment(receiver: OtlpReceiver, service: str, targets: str, baggage: str, http: str = "contrib") -> dict[str, str]:
    return {
        **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
        "PYTHONPATH": str(ROOT),
        "OTEL_SERVICE_NAME": service,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_PYTHON_GYM_PRESETS": "nemo_gym",  # NeMo Gym is absent; its uvicorn request boundary applies
        "OTEL_PYTHON_GYM_TARGETS": targets,
        "OTEL_PYTHON_GYM_BAGGAGE": baggage,
        **({"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "aiohttp-client,fastapi"} if http != "contrib" else {}),
        **({"OTEL_PYTHON_GYM_PROPAGATION": "false"} if http == "none" else {}),
        **({"OTEL_PYTHON_GYM_SERVER_TELEMETRY": "false"} if http == "quiet" else {}),
    }


def wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server on port {port} exited early:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"server on port {port} not listening after 60s:\n{log.read_text()}")


def run_pipeline(tmp_path: Path, baggage: str, http: str = "contrib") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    servers: list[subprocess.Popen[bytes]] = []
    with OtlpReceiver() as receiver:
        try:
            resources_port, agent_port = free_port(), free_port()
            for name, factory, port, targets, extra in (
                ("resources", "resources_app", resources_port, f"{MODULE}:ResourcesServer.verify=verify@nemo_gym", {}),
                ("agent", "agent_app", agent_port, INJECT, {"RESOURCES_URL": f"http://127.0.0.1:{resources_port}"}),
            ):
                log = tmp_path / f"{name}.log"
                command = [
                    LAUNCHER,
                    sys.executable,
                    "-m",
                    "uvicorn",
                    f"{MODULE}:{factory}",
                    "--factory",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ]
                env = {**environment(receiver, name, targets, baggage, http), **extra}
                with log.open("wb") as out:
                    servers.append(
                        subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
                    )
                wait_until_listening(port, servers[-1], log)
            collector = subprocess.run(
                [
                    LAUNCHER,
                    sys.executable,
                    "-m",
                    "tests.crossprocess.collector_main",
                    f"http://127.0.0.1:{agent_port}",
                    str(TASKS),
                    str(REPEATS),
                ],
                env=environment(receiver, "collector", f"{MODULE}:ServerClient.post=dispatch@nemo_gym,{INJECT}", baggage, http),
                capture_output=True,
                text=True,
                timeout=120,
                cwd=ROOT,
            )
            assert collector.returncode == 0, collector.stderr
            results = json.loads(collector.stdout.strip().splitlines()[-1])
            rollouts = TASKS * REPEATS
            # Each service exports on its own schedule: wait for the dispatch and verify spans and for the
            # parent of every span received, so that no trace is judged while a service is still sending.
            spans = receiver.wait_for(
                lambda spans: (
                    sum(s["name"] == semconv.SPAN_VERIFY for s in spans) >= rollouts
                    and sum(s["name"] == semconv.SPAN_DISPATCH for s in spans) >= rollouts
                    and {s["parent_id"] for s in spans if s["parent_id"]} <= {s["span_id"] for s in spans}
                ),
                timeout=60,
                what=f"{rollouts} dispatch and {rollouts} verify spans, and every parent span named",
            )
            return spans, results
        finally:
            for server in servers:
                if server.poll() is None:
                    os.killpg(server.pid, signal.SIGTERM)
            for server in servers:
                try:
                    server.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()


def ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    parent = by_id.get(span["parent_id"] or "")
    while parent is not None:
        yield parent
        parent = by_id.get(parent["parent_id"] or "")


@pytest.mark.parametrize(
    ("http", "baggage"), [("contrib", "true"), ("contrib", "false"), ("own", "true"), ("own", "false"), ("quiet", "true")]
)
def test_one_trace_per_rollout_across_three_processes(tmp_path: Path, http: str, baggage: str) -> None:
    spans, results = run_pipeline(tmp_path, baggage, http)
    assert sorted(result["reward"] for result in results) == [0.0] * TASKS + [1.0] * TASKS
    # Never two traceparent headers: contrib's client injects, and the inject target then does nothing.
    assert [result["traceparents"] for result in results] == [1] * TASKS * REPEATS
    # One server span per /run and per /verify, never a second: contrib's, or (contrib off) the one
    # FastAPI >= 0.165 makes itself whenever an SDK is set, which steps back when contrib's is there.
    # With the server_telemetry setting off ("quiet"), FastAPI makes none: only the package's spans.
    servers = [span for span in spans if span["kind"] == SpanKind.SERVER.value + 1]  # (OTLP's enum is the API's + 1)
    assert len(servers) == (0 if http == "quiet" else 2 * TASKS * REPEATS)
    if http == "quiet":
        assert sorted(span["name"] for span in spans) == sorted([semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY] * TASKS * REPEATS)
    if http != "contrib":
        # No span for a hop from the package, and no client span at all.
        assert not [span for span in spans if span["kind"] == SpanKind.CLIENT.value + 1]
        assert {span["name"] for span in spans if not span["name"].startswith(FASTAPI_NATIVE)} == {
            semconv.SPAN_DISPATCH,
            semconv.SPAN_VERIFY,
        }
    by_id = {span["span_id"]: span for span in spans}
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    verifies = [span for span in spans if span["name"] == semconv.SPAN_VERIFY]
    assert len(dispatches) == len(verifies) == TASKS * REPEATS
    assert len({span["trace_id"] for span in dispatches}) == TASKS * REPEATS  # one trace per rollout
    for dispatch in dispatches:
        trace = [span for span in spans if span["trace_id"] == dispatch["trace_id"]]
        # (quiet: the agent, which only relays, makes no span; its hop still carries the context)
        assert {span["service"] for span in trace} == {"collector", "resources"} | ({"agent"} if http != "quiet" else set())
        assert dispatch["service"] == "collector"
        (verify,) = [span for span in trace if span["name"] == semconv.SPAN_VERIFY]
        assert verify["service"] == "resources"
        if http == "quiet":
            assert verify["parent_id"] == dispatch["span_id"]
        assert dispatch in list(ancestors(verify, by_id))  # verify descends from the dispatch
        task_index = dispatch["attributes"][semconv.TASK_INDEX]
        assert (semconv.TASK_ID in dispatch["attributes"]) == (task_index % 2 == 0)
        if baggage == "true":
            # The request body had no id: it reached the resources server only as W3C baggage.
            assert verify["attributes"][semconv.ROLLOUT_ID] == dispatch["attributes"][semconv.ROLLOUT_ID]
        else:
            assert semconv.ROLLOUT_ID not in verify["attributes"]
        expected_reward = 1.0 if dispatch["attributes"][semconv.ROLLOUT_REPEAT] == 0 else 0.0
        assert verify["attributes"][semconv.ROLLOUT_REWARD] == expected_reward


def test_without_any_propagation_each_verify_is_a_trace_of_its_own(tmp_path: Path) -> None:
    """Contrib disabled and the package's propagation off: nothing carries the context (the setting works)."""
    spans, results = run_pipeline(tmp_path, "true", "none")
    assert [result["traceparents"] for result in results] == [0] * TASKS * REPEATS
    dispatches = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert len(dispatches) == TASKS * REPEATS
    by_id = {span["span_id"]: span for span in spans}
    for verify in (span for span in spans if span["name"] == semconv.SPAN_VERIFY):
        assert not [span for span in ancestors(verify, by_id) if span["service"] != "resources"]
