"""A real inspect-ai evaluation under gym_instrument with the real OpenTelemetry SDK, in a process
of its own (``tests/test_inspect_preset.py`` runs it): inspect-ai is imported only after
``instrument()``, as under ``opentelemetry-instrument``. Prints one JSON document: the spans and,
per sample-epoch, what inspect's own log says.

The evaluation: the mock model (its outputs carry usage, so no tokenizer is downloaded), a
built-in letter scorer (``includes``), 3 samples x 2 epochs, one sample whose solver raises, with
``fail_on_error=False``, and ``retry_on_error`` when asked (``--retry``: the sample ``flaky``
fails on its first attempt only).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gym_instrument import GymInstrumentor


def main() -> None:
    retry = "--retry" in sys.argv
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    GymInstrumentor().instrument(tracer_provider=provider)  # the default presets, inspect_ai's among them

    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import includes
    from inspect_ai.solver import solver

    failed_once: set[tuple[Any, int]] = set()

    @solver
    def answer_or_raise() -> Any:
        async def solve(state: Any, generate: Any) -> Any:
            if state.sample_id == "boom":
                raise RuntimeError("the solver fails")
            key = (state.sample_id, state.epoch)
            if state.sample_id == "flaky" and key not in failed_once:
                failed_once.add(key)
                raise ConnectionError("first attempt only")
            return await generate(state)

        return solve

    def output(text: str) -> Any:
        made = ModelOutput.from_content("mockllm/model", text)
        made.usage = ModelUsage(input_tokens=3, output_tokens=2, total_tokens=5)
        return made

    samples = [Sample(id="right", input="2+2?", target="4"), Sample(id=7, input="3+3?", target="6")]
    samples.append(Sample(id="flaky" if retry else "boom", input="?", target="x"))
    model = get_model("mockllm/model", custom_outputs=[output("it is 4"), output("it is 5")] * 8)
    task = Task(dataset=samples, solver=[answer_or_raise()], scorer=includes())
    (log,) = eval(
        task,
        model=model,
        epochs=2,
        fail_on_error=False,
        retry_on_error=1 if retry else None,
        display="none",
        log_dir=sys.argv[1],
        max_samples=1,  # one at a time: the mock model's outputs go in order
    )
    provider.force_flush()
    spans = [
        {
            "name": span.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent": span.parent.span_id if span.parent else None,
            "status": span.status.status_code.name,
            "attributes": dict(span.attributes or {}),
        }
        for span in exporter.get_finished_spans()
    ]
    logged = [
        {
            "id": sample.id,
            "epoch": sample.epoch,
            "uuid": sample.uuid,
            "value": next(iter(sample.scores.values())).value if sample.scores else None,
            "error": sample.error is not None,
            "retries": len(sample.error_retries or []),
        }
        for sample in log.samples or []
    ]
    print(json.dumps({"spans": spans, "samples": logged}))


if __name__ == "__main__":
    main()
