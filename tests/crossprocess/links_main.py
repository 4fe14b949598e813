"""One process of a sharded run (``collect``, ``aggregate`` or ``health``), instrumented with a real
SDK; prints the spans it exported as JSON lines on stdout."""

import asyncio
import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor, Target

PIPELINE = "tests.crossprocess.run_pipeline"


def main() -> None:
    action, config = sys.argv[1], json.loads(sys.argv[2])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    GymInstrumentor().instrument(
        tracer_provider=provider,
        presets="none",
        targets=[
            Target(f"{PIPELINE}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json"),
            f"{PIPELINE}:RolloutCollectionHelper.run_from_config=run",
            f"{PIPELINE}:RolloutAggregationHelper.run_from_config=run",
            f"{PIPELINE}:run_health_checks=health",
        ],
    )
    from tests.crossprocess import run_pipeline

    if action == "collect":
        asyncio.run(run_pipeline.RolloutCollectionHelper().run_from_config(config))
    elif action == "aggregate":
        result = asyncio.run(run_pipeline.RolloutAggregationHelper().run_from_config(config))
        print(json.dumps({"result": result}))
    else:
        result = run_pipeline.run_health_checks(config["paths"], output_dir=config.get("output_dir"))
        print(json.dumps({"result": result}))
    for span in exporter.get_finished_spans():
        print(
            json.dumps(
                {
                    "name": span.name,
                    "trace_id": span.context.trace_id,
                    "span_id": span.context.span_id,
                    "parent": span.parent.span_id if span.parent else None,
                    "parent_trace": span.parent.trace_id if span.parent else None,
                    "attributes": {key: list(v) if isinstance(v, tuple) else v for key, v in span.attributes.items()},
                }
            )
        )


main()
