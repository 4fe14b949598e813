"""One process of a generate-then-score loop (``generate`` or ``score``), instrumented by a
configuration with a real SDK; prints its result and the spans it exported as JSON lines."""

import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor

LOOP = "tests.crossprocess.score_loop"
CONFIG = {
    "targets": [
        {
            "path": f"{LOOP}:generate",
            "role": "dispatch",
            "row": "task",
            "start": {"task_id": "row.task_id", "repeat": "arg.repeat", "rollout_id": {"template": "{task_id}-r{repeat}"}},
        },
        {
            "path": f"{LOOP}:score",
            "role": "verify",
            "start": {"task_id": "arg.task_id", "repeat": "arg.repeat", "rollout_id": {"template": "{task_id}-r{repeat}"}},
        },
    ]
}


def main() -> None:
    action, given = sys.argv[1], json.loads(sys.argv[2])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if given["by_task"]:  # the verify names its rollout by task id and repeat alone
        CONFIG["targets"][1]["start"] = {"task_id": "arg.task_id", "repeat": "arg.repeat"}
    GymInstrumentor().instrument(tracer_provider=provider, presets="none", config=CONFIG)
    from tests.crossprocess import score_loop

    if action == "generate":
        result = [score_loop.generate(task, repeat) for task in score_loop.TASKS for repeat in range(given["repeats"])]
    else:
        result = [score_loop.score(r["completion"], r["task_id"], r["repeat"]) for r in given["rollouts"]]
    print(json.dumps({"result": result}))
    for span in exporter.get_finished_spans():
        print(
            json.dumps(
                {
                    "name": span.name,
                    "trace_id": span.context.trace_id,
                    "span_id": span.context.span_id,
                    "parent": span.parent.span_id if span.parent else None,
                    "attributes": dict(span.attributes),
                }
            )
        )


main()
