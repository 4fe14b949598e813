"""A sampler that drops the package's own spans and records every other one (``whole_run.py --drop-ours``).

Issue 14 asks for OpenTelemetry's own part of the package's cost, measured apart. With this sampler
in full's processes, the package runs as it does by default (it admits each call, reads its row, starts
its span, carries the baggage) but the SDK makes a non-recording span of each ``gym.*`` span: no
attributes cleaned, nothing queued, exported or received. So full - this variant is what recording,
exporting and receiving the package's spans costs in the run; this variant - contrib is the package's
own work (less its end rules, which skip a span that is not recording, a few microseconds per rollout).

Every other span is recorded and sampled whatever its parent says (``ALWAYS_ON``), so the HTTP spans
under a dropped dispatch span are the same as in contrib. ``whole_run.py`` copies this file into the
NeMo Gym venv with an ``opentelemetry_traces_sampler`` entry point for the run, and removes both after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from gym_instrument import semconv

OURS = frozenset({semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY, semconv.SPAN_HEALTH})

_DROP = SamplingResult(Decision.DROP)


class DropOurs(Sampler):
    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if name in OURS:
            return _DROP
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "DropOurs"


def sampler(_argument: str | None = None) -> Sampler:
    """The entry point's factory (the SDK passes it ``OTEL_TRACES_SAMPLER_ARG``)."""
    return DropOurs()
