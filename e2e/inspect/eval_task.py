"""A real inspect-ai evaluation for `make e2e-inspect`, with no telemetry code: the mock model,
the built-in letter scorer ``includes``, 4 samples x 2 epochs, one sample whose solver raises,
``fail_on_error=False``. Run as ``python eval_task.py LOG_DIR`` (under ``opentelemetry-instrument``);
inspect writes its own log to LOG_DIR, which the e2e reads back with ``read_eval_log``.
"""

from __future__ import annotations

import sys
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes
from inspect_ai.solver import solver


@solver
def answer_or_raise() -> Any:
    async def solve(state: Any, generate: Any) -> Any:
        if state.sample_id == "broken":
            raise RuntimeError("this sample's solver fails")
        return await generate(state)

    return solve


def output(text: str) -> ModelOutput:
    # Usage set, so the mock model counts no tokens (which would download a tokenizer).
    made = ModelOutput.from_content("mockllm/model", text)
    made.usage = ModelUsage(input_tokens=3, output_tokens=2, total_tokens=5)
    return made


def main() -> None:
    samples = [
        Sample(id="add", input="2+2?", target="4"),
        Sample(id="mul", input="3*3?", target="9"),
        Sample(id=7, input="the capital of France?", target="Paris"),
        Sample(id="broken", input="?", target="x"),
    ]
    answers = ["it is 4", "it is 6", "Paris", "4", "9", "Lyon"]  # one per solved sample, in order
    model = get_model("mockllm/model", custom_outputs=[output(text) for text in answers])
    task = Task(dataset=samples, solver=[answer_or_raise()], scorer=includes())
    eval(task, model=model, epochs=2, fail_on_error=False, log_dir=sys.argv[1], max_samples=1, display="plain")


if __name__ == "__main__":
    main()
