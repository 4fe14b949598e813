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
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor

DATA = Path(__file__).parent / "data"


def load_jsonl(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


class Telemetry:
    """What a user's exporters and readers would receive."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if name is None or span.name == name]

    def metric_points(self, metric_name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == metric_name:
                        points.extend(metric.data.data_points)
        return points

    def metric_total(self, metric_name: str) -> int:
        return sum(point.value for point in self.metric_points(metric_name))


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    collected = Telemetry()
    yield collected
    collected.tracer_provider.shutdown()
    collected.meter_provider.shutdown()


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
