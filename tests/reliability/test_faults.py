"""Faults around the package: the exporter cannot reach its collector (a closed port, a socket
that accepts and never answers), no meter provider, the tracer provider shut down mid-run, and
``uninstrument()`` while rollouts are in flight. The pipeline must finish with identical results
and the failed exports are logged, never raised. (How long they cost is a benchmark's
question, not a test's: this machine is shared.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gym_instrument import GymInstrumentor, semconv

from . import pipeline
from .strategies import CANARY
from .support import Sink, all_logs, instrumented

ROLLOUTS = 300  # 900 spans: more than one 512-span export batch
EXPORT_TIMEOUT_S = 1.0  # the exporter's own per-export timeout (OTLPSpanExporter(timeout=...))


def rows(count: int, repeats: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "_ng_task_index": index // repeats,
            "_ng_rollout_index": index % repeats,
            "agent_ref": {"name": "simple_agent"},
            "prompt": f"What is 2+2? {CANARY}",
        }
        for index in range(count)
    ]


async def collect(client: pipeline.ServerClient, batch: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    """The collector: every row to /run concurrently, then the health pass on a worker thread."""
    results = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in batch))
    health = await asyncio.to_thread(pipeline.run_health_checks, results)
    return results, health


def run_pipeline(batch: list[dict[str, Any]], **client_options: Any) -> tuple[list[Any], Any]:
    client = pipeline.ServerClient(pipeline.ScoringServer(), **client_options)
    return asyncio.run(collect(client, batch))


def expected_results(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "reward": pipeline.expected_reward(row["_ng_task_index"], row["_ng_rollout_index"]),
            "_ng_task_index": row["_ng_task_index"],
            "_ng_rollout_index": row["_ng_rollout_index"],
        }
        for row in batch
    ]


# -- collectors that are not there -----------------------------------------------------------------


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def silent_collector() -> Iterator[tuple[int, list[socket.socket]]]:
    """A socket on 127.0.0.1 that accepts every connection and never reads or answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_forever() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            accepted.append(connection)  # held open, never answered

    acceptor = threading.Thread(target=accept_forever, daemon=True)
    acceptor.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        acceptor.join()
        for connection in accepted:
            connection.close()
        server.close()


class OtlpSetup:
    """The standard production setup: batch span processor and periodic metric reader, OTLP/HTTP."""

    def __init__(self, port: int) -> None:
        endpoint = f"http://127.0.0.1:{port}"
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=EXPORT_TIMEOUT_S))
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=EXPORT_TIMEOUT_S),
            export_interval_millis=200,  # exports (and fails) during the run, not only at shutdown
        )
        self.meter_provider = MeterProvider(metric_readers=[reader])

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def assert_pipeline_unharmed(port: int) -> None:
    batch = rows(ROLLOUTS)
    reference, reference_health = run_pipeline(batch)  # not instrumented
    setup = OtlpSetup(port)
    with all_logs() as logs:
        with instrumented(None, pipeline.targets(), tracer_provider=setup.tracer_provider, meter_provider=setup.meter_provider):
            results, health = run_pipeline(batch)
        setup.shutdown()  # returns: each remaining batch waits out at most the exporter's own timeout

    assert results == reference == expected_results(batch)
    assert health == reference_health
    # The spans could not be delivered: the exporter says so in its log, and nothing is raised.
    exporter_lines = [record for record in logs.records if record.name.startswith("opentelemetry.exporter")]
    assert exporter_lines, "the exporter did not log the failed export"
    assert CANARY not in logs.text()


def test_exporter_pointed_at_a_closed_port() -> None:
    assert_pipeline_unharmed(closed_port())


def test_exporter_pointed_at_a_collector_that_never_answers() -> None:
    with silent_collector() as (port, accepted):
        assert_pipeline_unharmed(port)
        assert accepted, "the exporter never reached the silent collector"


# -- no metrics, and a tracer provider that goes away -------------------------------------------


def test_no_meter_provider_spans_still_complete() -> None:
    """With no meter provider configured (the global one is the API's proxy), spans are whole."""
    assert type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider", "a test set a global meter provider"
    sink = Sink()
    batch = rows(30)
    with instrumented(sink, pipeline.targets(), meter_provider=None):
        results, _health = run_pipeline(batch)
    assert results == expected_results(batch)
    assert len(sink.spans(semconv.SPAN_DISPATCH)) == len(sink.spans(semconv.SPAN_VERIFY)) == len(batch)
    assert len(sink.spans(semconv.SPAN_HEALTH)) == len(batch)
    rewards = [span.attributes[semconv.ROLLOUT_REWARD] for span in sink.spans(semconv.SPAN_VERIFY)]
    assert sorted(rewards) == sorted(result["reward"] for result in results)
    assert sink.metrics_data() is None or sink.metric_points(semconv.METRIC_REWARDED) == []


def test_a_no_op_meter_provider_spans_still_complete() -> None:
    sink = Sink()
    batch = rows(30)
    with instrumented(sink, pipeline.targets(), meter_provider=NoOpMeterProvider()):
        results, _health = run_pipeline(batch)
    assert results == expected_results(batch)
    assert len(sink.spans(semconv.SPAN_VERIFY)) == len(batch)
    assert len(sink.spans(semconv.SPAN_HEALTH)) == len(batch)


def test_tracer_provider_shut_down_in_the_middle_of_a_run() -> None:
    sink = Sink()
    batch = rows(200)

    async def run() -> list[Any]:
        gate = asyncio.Event()
        free = pipeline.ServerClient(pipeline.ScoringServer())
        gated = pipeline.ServerClient(pipeline.ScoringServer(), gate=gate)
        early = await asyncio.gather(*(free.post("agent", "/run", json=row) for row in batch[:100]))
        late = [asyncio.ensure_future(gated.post("agent", "/run", json=row)) for row in batch[100:]]
        for _ in range(5):
            await asyncio.sleep(0)  # the late half is in flight, waiting at the gate
        sink.tracer_provider.shutdown()
        gate.set()
        results = early + list(await asyncio.gather(*late))
        await asyncio.to_thread(pipeline.run_health_checks, results)  # health after the shutdown
        return results

    with instrumented(sink, pipeline.targets()):
        results = asyncio.run(run())
    assert results == expected_results(batch)
    exported = sink.spans(semconv.SPAN_DISPATCH)
    assert len(exported) == 100  # what ended before the shutdown was exported, nothing after
    early_ids = {f"{row['_ng_task_index']}-{row['_ng_rollout_index']}" for row in batch[:100]}
    assert {span.attributes[semconv.ROLLOUT_ID] for span in exported} == early_ids


# -- uninstrument() while rollouts are in flight ----------------------------------------------------


def test_uninstrument_while_async_rollouts_are_in_flight() -> None:
    """Rollouts in flight finish, their spans end whole (verify and reward included), nothing raises."""
    sink = Sink()
    batch = rows(200)
    instrumentor = GymInstrumentor()

    async def run() -> tuple[list[Any], Any]:
        server = pipeline.GatedScoringServer(asyncio.Event())
        client = pipeline.ServerClient(server)
        in_flight = [asyncio.ensure_future(client.post("agent", "/run", json=row)) for row in batch]
        while server.waiting < len(batch):
            await asyncio.sleep(0)
        instrumentor.uninstrument()
        server.gate.set()
        results = await asyncio.gather(*in_flight)
        after = await client.post("agent", "/run", json=rows(1)[0])  # no longer traced
        return list(results), after

    instrumentor.instrument(
        tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider, presets="none", targets=pipeline.targets()
    )
    try:
        results, after = asyncio.run(run())
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    assert results == expected_results(batch)
    assert after == expected_results(rows(1))[0]
    assert_in_flight_spans_whole(sink, batch)


def test_uninstrument_while_threaded_rollouts_are_in_flight() -> None:
    sink = Sink()
    batch = rows(64)
    instrumentor = GymInstrumentor()
    server = pipeline.GatedScoringServer(threading.Event())
    client = pipeline.ServerClient(server)

    def uninstrument_when_all_wait() -> None:
        while server.waiting < len(batch):
            time.sleep(0.001)
        instrumentor.uninstrument()
        server.gate.set()

    instrumentor.instrument(
        tracer_provider=sink.tracer_provider, meter_provider=sink.meter_provider, presets="none", targets=pipeline.targets()
    )
    try:
        releaser = threading.Thread(target=uninstrument_when_all_wait)
        releaser.start()
        results = pipeline.run_in_threads(len(batch), lambda position: client.post_sync("agent", "/run", json=batch[position]))
        releaser.join()
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    assert results == expected_results(batch)
    assert_in_flight_spans_whole(sink, batch)


def assert_in_flight_spans_whole(sink: Sink, batch: list[dict[str, Any]]) -> None:
    dispatches = sink.spans(semconv.SPAN_DISPATCH)
    verifies = sink.spans(semconv.SPAN_VERIFY)
    assert len(dispatches) == len(verifies) == len(batch)  # and none for the call after uninstrument()
    by_span_id = {span.context.span_id: span for span in dispatches}
    for verify in verifies:
        dispatch = by_span_id[verify.parent.span_id]
        rollout_id = dispatch.attributes[semconv.ROLLOUT_ID]
        assert verify.attributes[semconv.ROLLOUT_ID] == rollout_id
        task_index, rollout_index = map(int, rollout_id.split("-"))
        assert verify.attributes[semconv.ROLLOUT_REWARD] == pipeline.expected_reward(task_index, rollout_index)
    # The counter agrees with the spans: every verify that put a reward on its span was counted
    # on the meter provider it was instrumented with.
    assert sink.metric_total(semconv.METRIC_REWARDED) == len(batch)
