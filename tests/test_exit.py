"""Spans that stay true when the process ends (``record/exit.py``): real processes.

A dispatch whose response is never read ends before the tracer provider shuts down at exit, even
when a ``weakref.finalize`` was made before the provider (a ``tempfile.TemporaryDirectory``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gym_instrument import semconv
from tests.test_crossprocess import ROOT


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
    print(json.dumps([before, time.time_ns()]))


asyncio.run(main())
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


def test_a_response_never_read_ends_its_dispatch_before_the_provider_shuts_down(tmp_path: Path) -> None:
    (tmp_path / "collector.py").write_text(COLLECTOR)
    (tmp_path / "never_read.py").write_text(NEVER_READ)
    spans_file = tmp_path / "spans.jsonl"
    process = subprocess.run(
        [sys.executable, str(tmp_path / "never_read.py"), str(spans_file)],
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr
    before, returned = json.loads(process.stdout)
    spans, _ = exported(spans_file)
    [dispatch] = [span for span in spans if span["name"] == semconv.SPAN_DISPATCH]
    assert attributes(dispatch)[semconv.ROLLOUT_ID] == "2-0"
    # It lasted as long as the POST, not until the exit.
    assert before <= int(dispatch["startTimeUnixNano"]) <= int(dispatch["endTimeUnixNano"]) <= returned
    assert process.stderr == ""
