"""What runs in child processes: a forked child that keeps the parent's instrumentation, and a
spawned child that imports and instruments the package itself. Results go back over a pipe."""

from __future__ import annotations

from typing import Any

from . import pipeline


def rows_for(first_task: int, count: int) -> list[dict[str, Any]]:
    return [
        {"_ng_task_index": first_task + index, "_ng_rollout_index": 0, "agent_ref": {"name": "child"}} for index in range(count)
    ]


def verdicts_for(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"task_index": row["_ng_task_index"], "rollout_index": row["_ng_rollout_index"], "verdict": "healthy", "findings": []}
        for row in rows
    ]


def forked_child(connection: Any, sink: Any, first_task: int, count: int, parent_verdicts: list[dict[str, Any]]) -> None:
    """In a fork of an instrumented parent: dispatch, then a health pass over the child's own
    rollouts and the parent's. Sends back the spans this child added to its copy of the exporter."""
    already = len(sink.spans())
    rows = rows_for(first_task, count)
    for row in rows:
        pipeline.dispatch(row, ("return", row))
    pipeline.health_pass([], ("return", verdicts_for(rows) + parent_verdicts))
    added = sink.spans()[already:]
    connection.send([(span.name, span.context.span_id, span.parent.span_id if span.parent else None) for span in added])
    connection.close()


def spawned_child(first_task: int, count: int) -> dict[str, Any]:
    """In a fresh interpreter: import the package, instrument with an SDK of its own, dispatch and
    run a health pass (twice, to show a second pass adds nothing)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gym_instrument import GymInstrumentor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = GymInstrumentor()
    instrumentor.instrument(tracer_provider=provider, presets="none", targets=pipeline.targets(pipeline.__name__))
    try:
        rows = rows_for(first_task, count)
        results = [pipeline.dispatch(row, ("return", row)) for row in rows]
        pipeline.health_pass([], ("return", verdicts_for(rows)))
        pipeline.health_pass([], ("return", verdicts_for(rows)))
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    return {
        "results_identical": all(result is row for result, row in zip(results, rows, strict=True)),
        "names": [span.name for span in spans],
        "distinct_span_ids": len(by_id),
        "health_parents_ok": all(
            by_id[span.parent.span_id].attributes["nemo.gym.rollout.id"] == span.attributes["nemo.gym.rollout.id"]
            for span in spans
            if span.name == "gym.rollout.health"
        ),
    }
