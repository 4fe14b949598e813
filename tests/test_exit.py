"""Spans that stay true when the process ends (``record/exit.py``): real processes, real signals.

- a dispatch whose response is never read ends before the tracer provider shuts down at exit,
  even when a ``weakref.finalize`` was made before the provider (a ``tempfile.TemporaryDirectory``),
  and before the flush when SIGTERM kills the process;
- a uvicorn server under ``opentelemetry-instrument`` stopped with SIGTERM or SIGINT exports the
  spans and metrics its batch processor and metric reader still held, then ends by its signal;
- the handler chains to a handler the application set, and leaves Python's SIGINT handler alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor, semconv
from tests.test_crossprocess import LAUNCHER, ROOT, free_port, wait_until_listening


def exported(path: Path) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The spans and the metric points (by metric name) a gym_json_file holds."""
    spans: list[dict[str, Any]] = []
    points: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        batch = json.loads(line)
        for resource in batch.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                spans.extend(scope.get("spans", []))
        for resource in batch.get("resourceMetrics", []):
            for scope in resource.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    for kind in ("sum", "gauge", "histogram"):
                        points.setdefault(metric["name"], []).extend(metric.get(kind, {}).get("dataPoints", []))
    return spans, points


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {kv["key"]: next(iter(kv["value"].values())) for kv in span.get("attributes", [])}


# -- at exit --------------------------------------------------------------------------------------

NEVER_READ = """
import asyncio
import json
import signal
import sys
import tempfile
import time

scratch = tempfile.TemporaryDirectory()  # a weakref.finalize made before the provider: its exit hook runs after

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gym_instrument import GymInstrumentor, Target
from gym_instrument.frameworks import FRAMEWORKS
from gym_instrument.tools.export import JsonFileSpanExporter

NEMO_GYM = FRAMEWORKS["nemo_gym"].schema

provider = TracerProvider()  # shuts down at exit (its own atexit hook), exporting what its processor holds
provider.add_span_processor(BatchSpanProcessor(JsonFileSpanExporter(sys.argv[1]), schedule_delay_millis=600_000))
GymInstrumentor().instrument(
    tracer_provider=provider,
    presets="none",
    targets=[
        Target("collector:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        Target("collector:get_response_json", "read_result", schema=NEMO_GYM),
    ],
)
import collector

kept = []  # the response, never read and never collected before the exit


async def main():
    before = time.time_ns()
    row = {"_ng_task_index": 2, "_ng_rollout_index": 0}
    kept.append(await collector.ServerClient([{"reward": 1.0}]).post(server_name="agent", url_path="/run", json=row))
    print(json.dumps([before, time.time_ns()]), flush=True)


asyncio.run(main())
if sys.argv[2] == "SIGTERM":  # stopped as Slurm or Kubernetes stop a job: no atexit runs
    signal.raise_signal(signal.SIGTERM)
"""

COLLECTOR = """
class Response:
    def __init__(self, status, body):
        self.status = status
        self._body = body

    async def read(self):
        return self._body


class ServerClient:
    def __init__(self, bodies):
        self.bodies = bodies

    async def post(self, server_name, url_path, **kwargs):
        return Response(200, self.bodies.pop(0))


async def get_response_json(response):
    return await response.read()
"""


@pytest.mark.parametrize("ending", ["exit", "SIGTERM"])
def test_a_response_never_read_ends_its_dispatch_before_the_provider_shuts_down(tmp_path: Path, ending: str) -> None:
    (tmp_path / "collector.py").write_text(COLLECTOR)
    (tmp_path / "never_read.py").write_text(NEVER_READ)
    spans_file = tmp_path / "spans.jsonl"
    process = subprocess.run(
        [sys.executable, str(tmp_path / "never_read.py"), str(spans_file), ending],
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == (0 if ending == "exit" else -signal.SIGTERM), process.stderr
    before, returned = json.loads(process.stdout)
    spans, _ = exported(spans_file)
    [dispatch] = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert attributes(dispatch)[semconv.ROLLOUT_ID] == "2-0"
    # It lasted as long as the POST, not until the exit.
    assert before <= int(dispatch["startTimeUnixNano"]) <= int(dispatch["endTimeUnixNano"]) <= returned
    assert process.stderr == ""


FORKED = """
import asyncio
import os
import signal
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gym_instrument import GymInstrumentor, Target
from gym_instrument.frameworks import FRAMEWORKS
from gym_instrument.tools.export import JsonFileSpanExporter

NEMO_GYM = FRAMEWORKS["nemo_gym"].schema
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(JsonFileSpanExporter(sys.argv[1]), schedule_delay_millis=600_000))
GymInstrumentor().instrument(
    tracer_provider=provider,
    presets="none",
    targets=[
        Target("collector:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
        Target("collector:get_response_json", "read_result", schema=NEMO_GYM),
    ],
)
import collector

client = collector.ServerClient([{"response": {"usage": {"input_tokens": 7, "output_tokens": 1}}}])
response = asyncio.run(client.post(server_name="agent", url_path="/run", json={"_ng_task_index": 0, "_ng_rollout_index": 3}))
child = os.fork()
if child == 0:  # a pool's worker, stopped with SIGTERM while the parent's dispatch waits for its body
    signal.raise_signal(signal.SIGTERM)
    os._exit(0)  # (not reached: the signal ends it)
_, status = os.waitpid(child, 0)
assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
asyncio.run(collector.get_response_json(response))  # the parent reads it: its dispatch ends, once
"""


def test_a_forked_child_stopped_by_sigterm_ends_none_of_its_parents_dispatches(tmp_path: Path) -> None:
    (tmp_path / "collector.py").write_text(COLLECTOR)
    (tmp_path / "forked.py").write_text(FORKED)
    spans_file = tmp_path / "spans.jsonl"
    process = subprocess.run(
        [sys.executable, str(tmp_path / "forked.py"), str(spans_file)],
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr
    spans, _ = exported(spans_file)
    [dispatch] = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]  # the parent's, once
    assert attributes(dispatch)["gen_ai.usage.input_tokens"] == "7"  # (OTLP/JSON: an int64 is a string)


# -- at SIGTERM and SIGINT ------------------------------------------------------------------------


def serve_verify_then_stop(tmp_path: Path, stop: signal.Signals) -> tuple[int, Path, str]:
    """A resources server (real uvicorn and FastAPI under the launcher) that scores one verify and
    is then stopped with ``stop``; its batch processor and metric reader wait ten minutes between
    exports, so what reaches the file was flushed by the stop. Its exit code, file and log."""
    spans_file, log = tmp_path / "server.jsonl", tmp_path / "server.log"
    port = free_port()
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
        "PYTHONPATH": str(ROOT),
        "OTEL_SERVICE_NAME": "resources",
        "OTEL_TRACES_EXPORTER": "gym_json_file",
        "OTEL_METRICS_EXPORTER": "gym_json_file",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_PYTHON_GYM_JSON_FILE": str(spans_file),
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
        "OTEL_PYTHON_GYM_PRESETS": "nemo_gym",
        "OTEL_PYTHON_GYM_TARGETS": "tests.crossprocess.services:ResourcesServer.verify=verify@nemo_gym",
    }
    command = [LAUNCHER, sys.executable, "-m", "uvicorn", "tests.crossprocess.services:resources_app", "--factory"]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        wait_until_listening(port, server, log)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/verify",
            data=json.dumps({"answer": "B", "expected": "B"}).encode(),
            headers={"Content-Type": "application/json", "baggage": "nemo.gym.rollout.id=5-2"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read()) == {"reward": 1.0}
        server.send_signal(stop)
        returncode = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return returncode, spans_file, log.read_text()


# How the server ends, as it did without the package: killed by SIGTERM (uvicorn raises it again
# after its shutdown, with the default disposition); after SIGINT, asyncio's own Ctrl-C handling
# (which uvicorn raises it again to) ends it cleanly.
ENDS_WITH = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 0}


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_server_stopped_by_a_signal_exports_what_it_still_held(tmp_path: Path, stop: signal.Signals) -> None:
    returncode, spans_file, log = serve_verify_then_stop(tmp_path, stop)
    assert returncode == ENDS_WITH[stop], log  # the signal did what it did before
    spans, points = exported(spans_file)
    [verify] = [span for span in spans if span["name"] == semconv.SPAN_VERIFY]
    assert attributes(verify)[semconv.ROLLOUT_ID] == "5-2"
    assert attributes(verify)[semconv.ROLLOUT_REWARD] == 1.0
    assert [span["name"] for span in spans if span["kind"] in (2, "SPAN_KIND_SERVER")] == ["POST /verify"]  # FastAPI's own
    assert [int(point["asInt"]) for point in points[semconv.METRIC_REWARDED]] == [1]
    assert "Traceback" not in log


# -- the handler, in this process -----------------------------------------------------------------


@pytest.fixture
def batched() -> Any:
    """A provider whose batch processor would not export for ten minutes, and its exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    yield provider, exporter
    provider.shutdown()


def test_a_handler_the_application_set_runs_after_the_flush_and_is_put_back(batched: Any) -> None:
    provider, exporter = batched
    exported_when_called: list[list[str]] = []

    def application_handler(signum: int, frame: Any) -> None:
        exported_when_called.append([span.name for span in exporter.get_finished_spans()])

    previous = signal.signal(signal.SIGTERM, application_handler)
    instrumentor = GymInstrumentor()
    try:
        instrumentor.instrument(tracer_provider=provider, presets="none")
        provider.get_tracer("test").start_span("held").end()
        assert exporter.get_finished_spans() == ()  # in the batch, not exported yet
        signal.raise_signal(signal.SIGTERM)
        assert exported_when_called == [["held"]]  # flushed, then the application's own handler
        instrumentor.uninstrument()
        assert signal.getsignal(signal.SIGTERM) is application_handler
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        signal.signal(signal.SIGTERM, previous)


def test_pythons_sigint_handler_and_an_ignored_sigterm_are_left_alone(batched: Any) -> None:
    provider, _ = batched
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Python's own handler (KeyboardInterrupt exits through atexit anyway, and asyncio.run recognises
    # it); or what the process was started with (a job started in the background ignores SIGINT).
    sigint = signal.getsignal(signal.SIGINT)
    assert sigint in (signal.default_int_handler, signal.SIG_IGN)
    instrumentor = GymInstrumentor()
    try:
        instrumentor.instrument(tracer_provider=provider, presets="none")
        assert signal.getsignal(signal.SIGINT) is sigint
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        instrumentor.uninstrument()
        signal.signal(signal.SIGTERM, previous)


def test_instrumenting_from_another_thread_installs_no_handler(batched: Any) -> None:
    provider, _ = batched
    before = signal.getsignal(signal.SIGTERM)
    instrumentor = GymInstrumentor()
    worker = threading.Thread(target=lambda: instrumentor.instrument(tracer_provider=provider, presets="none"))
    worker.start()
    worker.join()
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        assert signal.getsignal(signal.SIGTERM) is before  # signals can only be set from the main thread
    finally:
        instrumentor.uninstrument()
