"""One process of a sharded run (``collect``, ``aggregate`` or ``health``), instrumented with a real
SDK; prints the spans it exported as JSON lines on stdout."""

import asyncio
import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor, Target
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM

PIPELINE = "tests.crossprocess.run_pipeline"


def main() -> None:
    action, given = sys.argv[1], sys.argv[2]
    config = json.loads(open(given[1:]).read() if given.startswith("@") else given)  # "@file": a config too long for argv
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    GymInstrumentor().instrument(
        tracer_provider=provider,
        presets="none",
        targets=[
            Target(f"{PIPELINE}:ServerClient.post", "dispatch", when={"url_path": "/run"}, row_arg="json", schema=NEMO_GYM),
            f"{PIPELINE}:RolloutCollectionHelper.run_from_config=run@nemo_gym",
            f"{PIPELINE}:RolloutAggregationHelper.run_from_config=run@nemo_gym",
            f"{PIPELINE}:run_health_checks=health@nemo_gym",
        ],
    )
    from tests.crossprocess import run_pipeline

    if action in ("collect", "collect-then-killed"):
        asyncio.run(run_pipeline.RolloutCollectionHelper().run_from_config(config))
        if action == "collect-then-killed":
            import os
            import signal
            import time

            time.sleep(config.get("sleep", 0))
            os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no flush: what the writer thread wrote stays
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
