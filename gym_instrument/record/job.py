"""The job a process was started for: the trace context in its environment.

OpenTelemetry specifies environment variables as context carriers ("Environment Variables as
Context Propagation Carriers"): a training job, a CI pipeline or a shell script that opened a
span starts the collector with ``TRACEPARENT`` (and ``TRACESTATE``, ``BAGGAGE``) set. A dispatch
span that has no other parent is then tied to that context: by default with a span link, so that
each rollout keeps its own trace (a million rollouts never become one trace), or as its parent
when ``OTEL_PYTHON_GYM_JOB_CONTEXT=parent`` asks for it. A span that already has a parent (a
server's, from the request's ``traceparent``) is never touched.

The variables are read once, when ``instrument()`` runs, through the configured propagators
(``OTEL_PROPAGATORS``, W3C trace context and baggage by default): a variable's name is its
carrier key in upper case.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import Link

_LOG = logging.getLogger("gym_instrument")

JOB_LINK = "link"
JOB_PARENT = "parent"
JOB_IGNORE = "ignore"
JOB_MODES = (JOB_LINK, JOB_PARENT, JOB_IGNORE)


class _EnvironmentGetter(Getter[Mapping[str, str]]):
    """Carrier keys are the propagators' field names; the variables are those names in upper case."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key.upper())
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return [key.lower() for key in carrier]


class JobContext:
    """The environment's trace context, ready to tie root dispatch spans to it."""

    __slots__ = ("as_parent", "context", "links", "span_context")

    def __init__(self, job_context: Context, span_context: trace.SpanContext, as_parent: bool) -> None:
        self.context = job_context
        self.span_context = span_context
        self.as_parent = as_parent
        self.links = (Link(span_context),)

    def parent_of(self, current: Context) -> Context:
        """``current`` with the job's span as the parent and the job's baggage beneath the call's own."""
        return Context({**self.context, **current})


def job_context(mode: str, environ: Mapping[str, str] | None = None) -> JobContext | None:
    """The job context of this process's environment, or None (no valid ``TRACEPARENT``, or ignored)."""
    if mode == JOB_IGNORE:
        return None
    environ = os.environ if environ is None else environ
    if not environ.get("TRACEPARENT", "").strip():
        return None
    try:
        extracted = propagate.extract(environ, getter=_EnvironmentGetter())
        span_context = trace.get_current_span(extracted).get_span_context()
    except Exception as error:  # a propagator of the user's that fails: the job context is left out
        _LOG.warning("gym_instrument: TRACEPARENT not read: %s", error)
        return None
    if not span_context.is_valid:
        _LOG.warning(
            "gym_instrument: TRACEPARENT=%r is not a valid W3C traceparent; dispatch spans are not tied to it",
            environ["TRACEPARENT"],
        )
        return None
    return JobContext(extracted, span_context, as_parent=mode == JOB_PARENT)


def environment_baggage(environ: Mapping[str, str] | None = None) -> Mapping[str, object]:
    """The W3C baggage entries of this process's ``BAGGAGE`` variable (empty when it has none), read
    through the configured propagators as ``TRACEPARENT`` is, with or without a ``TRACEPARENT``."""
    environ = os.environ if environ is None else environ
    if not environ.get("BAGGAGE", "").strip():
        return {}
    try:
        return baggage.get_all(propagate.extract(environ, getter=_EnvironmentGetter()))
    except Exception as error:  # a propagator of the user's that fails: the environment's baggage is left out
        _LOG.warning("gym_instrument: BAGGAGE not read: %s", error)
        return {}


def has_parent(current: Context) -> bool:
    """Whether a span started in ``current`` would have a parent."""
    return trace.get_current_span(current).get_span_context().is_valid
