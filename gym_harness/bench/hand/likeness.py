"""Whether two configurations exported the same spans for each rollout: the ``hand`` check.

A rollout is one trace: its ``gym.rollout.dispatch`` is the root, and everything the rollout causes
(the model calls, the verify, its health verdict) joins that trace through the propagated context.
The shape of a trace is the multiset of its spans, each told by its name, its kind and the set of its
attribute keys (values differ from run to run: ids, timings, verdicts). The rollout id of a trace is its
dispatch's ``nemo.gym.rollout.id``, the same in every configuration of a round. A span in a trace without
a dispatch is outside every rollout, and is counted by name apart. The package's metrics (``gym.*``) are
reported by name and the attribute keys of their points, not judged: a server exports them on the SDK's
timer (every 60 s), so a short run can end before one of them has. Standard library only.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_harness.otlp_json import SPAN_KIND_NAMES

DISPATCH = "gym.rollout.dispatch"
ROLLOUT_ID = "nemo.gym.rollout.id"

# One span: its name, its kind and its attribute keys, sorted.
SpanShape = tuple[str, str, tuple[str, ...]]
# One trace: its spans' shapes, sorted (a multiset).
TraceShape = tuple[SpanShape, ...]
# One metric's points: its name and their attribute keys, sorted.
MetricShape = tuple[str, tuple[str, ...]]
METRICS = "gym."  # the package's metrics' names start so
_METRIC_DATA = ("sum", "gauge", "histogram", "exponentialHistogram", "summary")


@dataclass
class RolloutSpans:
    """What one configuration exported, by rollout: the shapes its rollout's traces took (a rollout runs once a
    round), and the spans of traces that hold no dispatch, by name."""

    shapes: dict[str, set[TraceShape]] = field(default_factory=dict)
    outside: Counter[str] = field(default_factory=Counter)
    traces: int = 0
    metrics: set[MetricShape] = field(default_factory=set)

    def update(self, other: RolloutSpans) -> None:
        for rollout_id, shapes in other.shapes.items():
            self.shapes.setdefault(rollout_id, set()).update(shapes)
        self.outside.update(other.outside)
        self.traces += other.traces
        self.metrics.update(other.metrics)


def _kind(value: Any) -> str:
    if isinstance(value, int):
        return SPAN_KIND_NAMES.get(value, str(value))
    return str(value).removeprefix("SPAN_KIND_")


def _attribute(obj: dict[str, Any], key: str) -> Any:
    for pair in obj.get("attributes") or []:
        if pair.get("key") == key:
            return next(iter((pair.get("value") or {}).values()), None)
    return None


def span_shape(obj: dict[str, Any]) -> SpanShape:
    """A span in OTLP/JSON (``oteltap``'s lines): name, kind, attribute keys."""
    keys = tuple(sorted(pair.get("key", "") for pair in obj.get("attributes") or []))
    return obj.get("name", ""), _kind(obj.get("kind", 0)), keys


def rollout_spans(spans: Iterable[dict[str, Any]]) -> RolloutSpans:
    """The spans (OTLP/JSON objects) grouped by trace, each trace named by its dispatch's rollout id."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for obj in spans:
        by_trace.setdefault(obj.get("traceId", ""), []).append(obj)
    found = RolloutSpans()
    for members in by_trace.values():
        dispatches = [obj for obj in members if obj.get("name") == DISPATCH]
        rollout_id = _attribute(dispatches[0], ROLLOUT_ID) if len(dispatches) == 1 else None
        if rollout_id is None:  # no dispatch (or more than one: not one rollout's trace)
            found.outside.update(obj.get("name", "") for obj in members)
            continue
        found.traces += 1
        found.shapes.setdefault(str(rollout_id), set()).add(tuple(sorted(span_shape(obj) for obj in members)))
    return found


def metric_objects(path: Path, start: int = 0) -> Iterator[dict[str, Any]]:
    """The package's metrics (``gym.*``) the receiver printed from byte offset ``start`` on, parsed (every other
    metric, Ray's and HTTP's, is skipped unparsed, and so is a line still being written). A metric's line can
    name spans too (an exemplar's), a span's has them at its top level."""
    marker = f'"name":"{METRICS}'.encode()
    with path.open("rb") as lines:
        lines.seek(start)
        for line in lines:
            if marker not in line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "spanId" not in obj:
                yield obj


def metric_shapes(metrics: Iterable[dict[str, Any]]) -> set[MetricShape]:
    """Each of the package's metrics by name, with the attribute keys of each of its points."""
    shapes = set()
    for obj in metrics:
        name = obj.get("name", "")
        if not name.startswith(METRICS):
            continue
        for kind in _METRIC_DATA:
            for point in (obj.get(kind) or {}).get("dataPoints") or []:
                shapes.add((name, tuple(sorted(pair.get("key", "") for pair in point.get("attributes") or []))))
    return shapes


def _describe(shape: TraceShape) -> str:
    return "; ".join(f"{name} ({kind}): {', '.join(keys) or 'no attributes'}" for name, kind, keys in shape)


def differences(first: str, first_spans: RolloutSpans, second: str, second_spans: RolloutSpans) -> list[str]:
    """What differs between two configurations' spans (empty when each rollout's traces took the same shapes in
    both, and neither exported a span outside its rollouts that the other did not)."""
    problems = []
    only_first = sorted(set(first_spans.shapes) - set(second_spans.shapes))
    only_second = sorted(set(second_spans.shapes) - set(first_spans.shapes))
    if only_first:
        problems.append(f"rollouts traced by {first} only: {', '.join(only_first[:10])}")
    if only_second:
        problems.append(f"rollouts traced by {second} only: {', '.join(only_second[:10])}")
    for rollout_id in sorted(set(first_spans.shapes) & set(second_spans.shapes)):
        mine, theirs = first_spans.shapes[rollout_id], second_spans.shapes[rollout_id]
        if mine != theirs:
            problems.append(
                f"rollout {rollout_id}: {first} "
                + " | ".join(_describe(shape) for shape in sorted(mine - theirs))
                + f"; {second} "
                + " | ".join(_describe(shape) for shape in sorted(theirs - mine))
            )
    if set(first_spans.outside) != set(second_spans.outside):
        problems.append(
            f"spans outside any rollout: {first} {dict(sorted(first_spans.outside.items()))}, "
            f"{second} {dict(sorted(second_spans.outside.items()))}"
        )
    return problems


def same_lines(first: str, first_spans: RolloutSpans, second: str, second_spans: RolloutSpans) -> list[str]:
    """The check as the report says it."""
    problems = differences(first, first_spans, second, second_spans)
    if problems:
        return [
            f"**{first} and {second} did NOT export the same spans per rollout** (so the ratio between them is not like "
            f"with like): " + "; ".join(problems[:10]) + ("." if len(problems) <= 10 else f"; and {len(problems) - 10} more.")
        ]
    shapes = sorted({shape for found in first_spans.shapes.values() for shape in found})
    listed = " or ".join(f"[{_describe(shape)}]" for shape in shapes)
    outside = (
        ", ".join(f"`{name}` {count}" for name, count in sorted(first_spans.outside.items())) if first_spans.outside else "none"
    )
    return [
        f"**Same spans, checked** (`gym_harness/bench/hand/likeness.py`): for each of {len(first_spans.shapes)} rollouts, "
        f"{first}'s traces ({first_spans.traces}) and {second}'s ({second_spans.traces}) over the timed rounds held the same "
        f"spans, by name, kind and attribute keys: {listed}. Spans outside any rollout's trace: {first} {outside}; "
        f"{second} {', '.join(f'`{n}` {c}' for n, c in sorted(second_spans.outside.items())) or 'none'}. "
        + metrics_line(first, first_spans, second, second_spans)
    ]


def metrics_line(first: str, first_spans: RolloutSpans, second: str, second_spans: RolloutSpans) -> str:
    """The package's metrics each exported, by name and attribute keys."""

    def listed(metrics: set[MetricShape]) -> str:
        return ", ".join(f"`{name}` ({', '.join(keys) or 'no attributes'})" for name, keys in sorted(metrics)) or "none"

    if first_spans.metrics == second_spans.metrics:
        return f"Metrics, by name and the attribute keys of their points, the same in both: {listed(first_spans.metrics)}."
    return (
        f"Metrics, by name and the attribute keys of their points (servers export on the SDK's 60 s timer: a short run can "
        f"end before one has): {first} {listed(first_spans.metrics)}; {second} {listed(second_spans.metrics)}."
    )
