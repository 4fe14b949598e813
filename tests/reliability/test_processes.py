"""Processes: health verdicts computed in a process pool (fork and spawn) and emitted in the
parent; children that import the package, or inherit it through fork while other threads are
tracing, neither deadlock nor duplicate spans."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from gym_instrument import semconv

from . import pipeline, workers
from .support import Sink, instrumented

# Only a guard against a hung child, far above what any child here needs: a deadlock never ends.
HANG_GUARD_S = 120
FORKS = 60


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_health_computed_in_a_process_pool_is_emitted_in_the_parent(start_method: str) -> None:
    sink = Sink()
    batch = [{"_ng_task_index": index // 2, "_ng_rollout_index": index % 2} for index in range(200)]

    async def collect() -> tuple[list[Any], Any]:
        client = pipeline.ServerClient(pipeline.ScoringServer())
        results = await asyncio.gather(*(client.post("agent", "/run", json=row) for row in batch))
        health = await asyncio.to_thread(pipeline.run_health_checks, results, workers=2, start_method=start_method)
        return list(results), health

    with instrumented(sink, pipeline.targets()):
        _results, health = asyncio.run(collect())

    assert len({digest.rollout_id for digest in health.rollouts}) == len(batch)
    dispatches = {span.context.span_id: span for span in sink.spans(semconv.SPAN_DISPATCH)}
    healths = sink.spans(semconv.SPAN_HEALTH)
    assert len(healths) == len(batch)
    for span in healths:
        parent = dispatches[span.parent.span_id]
        assert parent.context.trace_id == span.context.trace_id
        assert parent.attributes[semconv.ROLLOUT_ID] == span.attributes[semconv.ROLLOUT_ID]
        task_index, rollout_index = map(int, span.attributes[semconv.ROLLOUT_ID].split("-"))
        expected = pipeline.digest({"_ng_task_index": task_index, "_ng_rollout_index": rollout_index})
        assert span.attributes[semconv.HEALTH_VERDICT] == expected.verdict
        assert list(span.attributes[semconv.HEALTH_CHECKS]) == sorted({finding["check"] for finding in expected.findings})


def test_spawned_children_import_and_instrument_the_package() -> None:
    """Each spawned child traces its own calls once: no deadlock, no duplicate, no lost span."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        reports = list(pool.map(workers.spawned_child, [0, 1000, 2000, 3000], [25, 25, 25, 25], timeout=HANG_GUARD_S))
    for report in reports:
        assert report["results_identical"]
        assert report["names"].count(semconv.SPAN_DISPATCH) == 25
        assert report["names"].count(semconv.SPAN_HEALTH) == 25  # the second health pass added nothing
        assert report["distinct_span_ids"] == 50
        assert report["health_parents_ok"]


class AppendOnlyExporter(SpanExporter):
    """Keeps spans in a list with no lock of its own (an append is atomic), unlike the SDK's
    in-memory exporter: the only locks a forked child can inherit held are then the package's."""

    def __init__(self) -> None:
        self.finished: list[ReadableSpan] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.finished.extend(spans)
        return SpanExportResult.SUCCESS


class ForkSink:
    def __init__(self) -> None:
        self.exporter = AppendOnlyExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [span for span in list(self.exporter.finished) if name is None or span.name == name]


def test_forked_children_while_another_thread_traces() -> None:
    """Fork again and again while another thread dispatches and runs health passes (the package's
    locks are taken and released all the time). Every child must finish, tracing only its own calls; a
    health pass in a child never takes a dispatch that belongs to the parent.

    The SDK's own locks (its in-memory exporter, its metric aggregations) are not the package's
    and are kept out of the child's way: a lock-free exporter, no meter provider."""
    sink = ForkSink()
    context = multiprocessing.get_context("fork")
    stop = threading.Event()
    parent_rows = workers.rows_for(900_000, 20)

    def keep_tracing(offset: int) -> None:
        task = offset
        while not stop.is_set():
            rows = workers.rows_for(task, 5)
            for row in rows:
                pipeline.dispatch(row, ("return", row))
            pipeline.health_pass([], ("return", workers.verdicts_for(rows)))
            task += 5

    with instrumented(None, pipeline.targets(), tracer_provider=sink.tracer_provider, meter_provider=NoOpMeterProvider()):
        for row in parent_rows:
            pipeline.dispatch(row, ("return", row))  # remembered in the parent, awaiting its verdicts
        threads = [threading.Thread(target=keep_tracing, args=(offset,)) for offset in (10_000_000,)]
        for thread in threads:
            thread.start()
        try:
            outcomes = []
            for fork in range(FORKS):
                receiver, sender = context.Pipe(duplex=False)
                child = context.Process(
                    target=workers.forked_child, args=(sender, sink, 1_000 * (fork + 1), 3, workers.verdicts_for(parent_rows))
                )
                child.start()
                sender.close()
                child.join(HANG_GUARD_S)
                if child.is_alive():
                    child.kill()
                    child.join()
                    pytest.fail(f"forked child {fork} hung (deadlocked) while another thread was tracing")
                assert child.exitcode == 0, f"forked child {fork} exited with {child.exitcode}"
                outcomes.append(receiver.recv())
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        # The parent's own verdicts arrive after all the forks: each finds its dispatch, once.
        pipeline.health_pass([], ("return", workers.verdicts_for(parent_rows)))

    for added in outcomes:
        names = [name for name, _span_id, _parent in added]
        assert names.count(semconv.SPAN_DISPATCH) == 3
        assert names.count(semconv.SPAN_HEALTH) == 3  # its own three; none for the parent's rollouts
        child_dispatches = {span_id for name, span_id, _parent in added if name == semconv.SPAN_DISPATCH}
        assert {parent for name, _span_id, parent in added if name == semconv.SPAN_HEALTH} == child_dispatches
    parent_ids = {f"{row['_ng_task_index']}-0" for row in parent_rows}
    parent_health = [span for span in sink.spans(semconv.SPAN_HEALTH) if span.attributes[semconv.ROLLOUT_ID] in parent_ids]
    assert len(parent_health) == len(parent_rows)
