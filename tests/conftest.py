"""Shared fixtures: a real SDK tracer provider with an in-memory exporter, a meter provider with
an in-memory reader, and an ``instrument`` helper that always uninstruments afterwards."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor, Target
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM

DATA = Path(__file__).parent / "data"


def load_jsonl(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


class Telemetry:
    """What a user's exporters and readers would receive."""

    def __init__(self, span_limits: SpanLimits | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(span_limits=span_limits)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if name is None or span.name == name]

    def clear(self) -> None:
        self.exporter.clear()

    def metrics_data(self) -> Any:
        return self.reader.get_metrics_data()

    def metric_points(self, metric_name: str, data: Any = None) -> list[Any]:
        data = self.metrics_data() if data is None else data
        points: list[Any] = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == metric_name:
                        points.extend(metric.data.data_points)
        return points

    def metric_total(self, metric_name: str) -> int:
        return sum(point.value for point in self.metric_points(metric_name))

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    collected = Telemetry()
    yield collected
    collected.shutdown()


@pytest.fixture
def instrument(telemetry: Telemetry) -> Iterator[Callable[..., GymInstrumentor]]:
    """``instrument(targets=[...], **kwargs)``: instrument with the test's providers, no presets by default."""
    instrumentors: list[GymInstrumentor] = []

    def _instrument(**kwargs: Any) -> GymInstrumentor:
        kwargs.setdefault("tracer_provider", telemetry.tracer_provider)
        kwargs.setdefault("meter_provider", telemetry.meter_provider)
        kwargs.setdefault("presets", "none")
        instrumentor = GymInstrumentor()
        instrumentor.instrument(**kwargs)
        instrumentors.append(instrumentor)
        return instrumentor

    yield _instrument
    for instrumentor in instrumentors:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


PIPELINE_SOURCE = '''
"""A small rollout pipeline shaped like NeMo Gym's: a client that POSTs rows, resources servers
that verify, a health pass. No telemetry code."""

import asyncio


class ServerClient:
    async def post(self, server_name, url_path, **kwargs):
        await asyncio.sleep(0)
        if kwargs.get("json", {}).get("fail"):
            raise ConnectionError("agent unreachable")
        return {"server": server_name, "path": url_path, "row": kwargs.get("json")}

    def post_sync(self, server_name, url_path, **kwargs):
        if kwargs.get("json", {}).get("fail"):
            raise ConnectionError("agent unreachable")
        return {"server": server_name, "path": url_path, "row": kwargs.get("json")}


class SimpleResourcesServer:
    async def verify(self, body):
        return {"reward": 0.0}


class McqaResourcesServer(SimpleResourcesServer):
    async def verify(self, body):
        return body["result"]


class Agent:
    """An in-process agent: its episode verifies the rollout it was dispatched for."""

    def __init__(self, server):
        self.server = server

    async def run(self, row):
        return await self.server.verify({"result": row.get("result", {"reward": 1.0})})


def run_health_checks(rollout_paths, workers=None):
    return {"rollouts": list(rollout_paths)}


def send_row(row):
    return {"echo": row}


def score(request):
    return request["result"]
'''


@pytest.fixture
def make_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Write a fresh, not yet imported module and return its name (unique per call)."""
    import sys
    import uuid

    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def _make(source: str = PIPELINE_SOURCE) -> str:
        name = f"gym_test_{uuid.uuid4().hex[:10]}"
        (tmp_path / f"{name}.py").write_text(source)
        created.append(name)
        return name

    yield _make
    for name in created:
        sys.modules.pop(name, None)


@pytest.fixture
def pipeline(make_module: Callable[..., str], instrument: Callable[..., GymInstrumentor]) -> Any:
    """The sample pipeline, imported after instrument() with dispatch/verify/health targets on it."""
    import importlib

    name = make_module()
    instrument(
        targets=[
            Target(f"{name}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
            Target(f"{name}:ServerClient.post_sync", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
            Target(f"{name}:SimpleResourcesServer.verify", "verify", schema=NEMO_GYM),
            f"{name}:Agent.run=dispatch@nemo_gym",
            f"{name}:run_health_checks=health@nemo_gym",
            f"{name}:send_row=dispatch@nemo_gym",
            f"{name}:score=verify@nemo_gym",
        ]
    )
    return importlib.import_module(name)
