"""Tokens of a run's rollouts: per rollout and per task (mean, p95), against the rollout's outcome,
and the slowest model calls.

A rollout's tokens are its dispatch's totals (``gen_ai.usage.input_tokens`` / ``output_tokens``,
``nemo.gym.rollout.model_calls``) when it has them, else the sum of its model-call spans (kind
CLIENT, ``gen_ai.operation.name``), joined to it as every other span is (by trace id and
``nemo.gym.rollout.id``, :mod:`gym_instrument.tools.report.rollouts`). The counts are kept in the
rollout store; here: the model-call spans read (count, failures, the slowest) and, after the join,
the figures.
"""

from __future__ import annotations

import heapq
from typing import Any

from gym_instrument import semconv
from gym_instrument.tools.report.links import trace_link
from gym_instrument.tools.report.otlp import STATUS_ERROR, Span
from gym_instrument.tools.report.sketch import DurationSketch

SLOWEST = 20


def token_count(value: Any) -> int | None:
    """A token count attribute: a non-negative int, else None (not reported)."""
    return value if type(value) is int and value >= 0 else None


class ModelCalls:
    """The model-call spans read: how many, which failed, the slowest (a fixed-size heap)."""

    def __init__(self) -> None:
        self.spans = 0
        self.errors: dict[str, int] = {}
        self.slowest: list[tuple[int, str, dict[str, Any]]] = []

    def add(self, span: Span, trace_url: str | None) -> None:
        attributes = span.attributes
        self.spans += 1
        error = attributes.get(semconv.ERROR_TYPE)
        if error is not None or span.status_code == STATUS_ERROR:
            name = str(error) if error is not None else "(error without error.type)"
            self.errors[name] = self.errors.get(name, 0) + 1
        if not span.end_ns >= span.start_ns > 0:
            return
        duration = span.end_ns - span.start_ns
        # Equal durations in a fixed order (by span id), so the read order never decides which are shown.
        item = (duration, span.span_id)
        if len(self.slowest) >= SLOWEST and item <= self.slowest[0][:2]:
            return
        entry = {
            "name": span.name,
            "model": attributes.get(semconv.GEN_AI_RESPONSE_MODEL) or attributes.get(semconv.GEN_AI_REQUEST_MODEL),
            "rollout_id": attributes.get(semconv.ROLLOUT_ID),
            "duration_ms": duration / 1e6,
            "input_tokens": token_count(attributes.get(semconv.GEN_AI_INPUT_TOKENS)),
            "output_tokens": token_count(attributes.get(semconv.GEN_AI_OUTPUT_TOKENS)),
            "finish_reasons": attributes.get(semconv.GEN_AI_FINISH_REASONS),
            "error_type": error,
            "trace_id": span.trace_id,
        }
        if trace_url:
            entry["trace_url"] = trace_link(trace_url, span.trace_id, span.span_id)
        if len(self.slowest) < SLOWEST:
            heapq.heappush(self.slowest, (duration, span.span_id, entry))
        else:
            heapq.heapreplace(self.slowest, (duration, span.span_id, entry))


def _order(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


class TokenFigures:
    """Tokens per rollout, per task and per outcome, added rollout by rollout after the join."""

    def __init__(self) -> None:
        self.run = DurationSketch()
        self.tasks: dict[str, DurationSketch] = {}
        self.by_outcome: dict[str, DurationSketch] = {}
        self.input_tokens = self.output_tokens = self.model_calls = self.from_dispatch = 0
        self.without_dispatch = {"input_tokens": 0, "output_tokens": 0, "model_calls": 0}

    def add(self, tokens: tuple[int, int, int, bool], task: str, outcome: str) -> None:
        """One rollout's (input, output, model calls, from its dispatch's totals), its task and its outcome's label."""
        count_in, count_out, calls, totals = tokens
        self.input_tokens += count_in
        self.output_tokens += count_out
        self.model_calls += calls
        self.from_dispatch += totals
        total = count_in + count_out
        self.run.add(total)
        for groups, name in ((self.tasks, task), (self.by_outcome, outcome)):
            sketch = groups.get(name)
            if sketch is None:
                sketch = groups[name] = DurationSketch()
            sketch.add(total)

    def add_without_dispatch(self, tokens: tuple[int, int, int, bool]) -> None:
        """Model calls whose rollout's dispatch was not read: counted apart, in no rollout."""
        for name, count in zip(("input_tokens", "output_tokens", "model_calls"), tokens[:3], strict=True):
            self.without_dispatch[name] += count

    def figures(self, calls: ModelCalls, not_kept: int) -> dict[str, Any]:
        def stats(sketch: DurationSketch) -> dict[str, Any]:
            return {
                "rollouts": sketch.count,
                "mean": sketch.total / sketch.count if sketch.count else None,
                "p95": sketch.quantile(0.95),
                "max": sketch.max,
            }

        return {
            "over": "rollouts with tokens (their dispatch's totals, else the sum of their model-call spans)",
            "rollouts": self.run.count,
            "from_dispatch_totals": self.from_dispatch,
            "from_model_call_spans": self.run.count - self.from_dispatch,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "model_call_spans": calls.spans,
            "model_call_errors": dict(sorted(calls.errors.items(), key=lambda item: (-item[1], item[0]))),
            "per_rollout": stats(self.run),
            "tasks": {task: stats(sketch) for task, sketch in self.tasks.items()},
            "by_reward": [
                {"reward": label, **stats(sketch)}
                for label, sketch in sorted(self.by_outcome.items(), key=lambda item: _order(item[0]))
            ],
            "without_dispatch": dict(self.without_dispatch),
            "slowest_model_calls": [entry for _, _, entry in sorted(calls.slowest, key=lambda item: item[:2], reverse=True)],
            "not_kept": not_kept,
        }
