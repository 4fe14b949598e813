"""Every OpenTelemetry internal the per-call path relies on, in one place, each with its fallback.

Each probe is made once, at import, through the public API itself (build a value with the public
function, read it back with the public function) and is trusted only if the round trip agrees.
When a probe fails (a future OpenTelemetry keeps things differently), its constant is ``None``
(or ``False``) and the callers take the public functions instead: slower, same behaviour.

``GYM_INSTRUMENT_OTEL_PROBES=off`` turns every probe off, so that the semantic test suite can run
through the fallbacks (``tests/test_compat.py`` does): the code that runs the day OpenTelemetry
changes is tested today.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation import utils as _instrumentation_utils
from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation
from opentelemetry.trace import DEFAULT_TRACE_STATE, INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, SpanContext, TraceFlags

PROBES_VARIABLE = "GYM_INSTRUMENT_OTEL_PROBES"
PROBES_ON = os.environ.get(PROBES_VARIABLE, "on").strip().lower() not in ("off", "0", "false", "no")


def _suppression_keys() -> tuple[str, ...] | None:
    """The context keys ``suppress_instrumentation`` sets, checked against the API."""
    keys = tuple(
        key
        for key in (
            getattr(_instrumentation_utils, "_SUPPRESS_INSTRUMENTATION_KEY", None),
            getattr(_instrumentation_utils, "_SUPPRESS_INSTRUMENTATION_KEY_PLAIN", None),
        )
        if isinstance(key, str)
    )
    try:
        with suppress_instrumentation():
            suppressed = context.get_current()
            agrees = not is_instrumentation_enabled() and any(suppressed.get(key) for key in keys)
        return keys if agrees and is_instrumentation_enabled() else None
    except Exception:
        return None


def _single_key(made: Context) -> str | None:
    keys = list(made)
    return keys[0] if len(keys) == 1 and isinstance(keys[0], str) else None


def _context_keys() -> tuple[str, str] | None:
    """The keys under which the API keeps the current span and the baggage in a context."""
    try:
        probe_span = NonRecordingSpan(INVALID_SPAN_CONTEXT)
        span_key = _single_key(trace.set_span_in_context(probe_span, Context()))
        baggage_key = _single_key(baggage.set_baggage("gym.probe", "1", Context()))
        if span_key is None or baggage_key is None or span_key == baggage_key:
            return None
        built = Context({span_key: probe_span, baggage_key: {"gym.probe": "1"}})
        if trace.get_current_span(built) is not probe_span or dict(baggage.get_all(built)) != {"gym.probe": "1"}:
            return None
        return span_key, baggage_key
    except Exception:
        return None


def _span_context_is_tuple() -> bool:
    """Whether a SpanContext is the tuple (trace_id, span_id, is_remote, trace_flags, trace_state, is_valid)."""
    try:
        fields = (5, 7, False, TraceFlags(1), DEFAULT_TRACE_STATE, True)
        made = SpanContext(trace_id=5, span_id=7, is_remote=False, trace_flags=TraceFlags(1))
        built = tuple.__new__(SpanContext, fields)
        return (
            isinstance(made, tuple)
            and tuple(made) == fields
            and (built.trace_id, built.span_id, built.is_remote, built.trace_flags, built.trace_state, built.is_valid) == fields
        )
    except Exception:
        return False


def _context_variable() -> ContextVar[Context] | None:
    """The context variable behind the API's runtime context (``context.get_current``, ``attach``,
    ``detach`` are two calls around one ``get``, ``set`` and ``reset`` of it)."""
    try:
        variable = getattr(getattr(context, "_RUNTIME_CONTEXT", None), "_current_context", None)
        if not isinstance(variable, ContextVar):
            return None
        probe = Context({"gym.probe": 1})
        token = variable.set(probe)
        try:
            seen = context.get_current() is probe
        finally:
            variable.reset(token)
        probe = Context({"gym.probe": 2})
        api_token = context.attach(probe)
        try:
            seen = seen and variable.get() is probe
        finally:
            context.detach(api_token)
        return variable if seen and context.get_current() is not probe else None
    except Exception:
        return None


def _provider_attribute() -> str | None:
    """The module attribute in which the API keeps the global tracer provider (None until one is set)."""
    name = "_TRACER_PROVIDER"
    try:
        value = getattr(trace, name)
    except AttributeError:
        return None
    provider = trace.get_tracer_provider()
    if value is None:
        return name if isinstance(provider, trace.ProxyTracerProvider) else None
    return name if value is provider else None


# Suppression: the keys whose truthy value in the current context means "do not instrument".
SUPPRESSION_KEYS = _suppression_keys() if PROBES_ON else None
# (span key, baggage key): a call's context is then built as one dict, in one step.
CONTEXT_KEYS = _context_keys() if PROBES_ON else None
# The span key alone: a context with one span set is then a copy of the current one and that key
# (None: ``trace.set_span_in_context``).
SPAN_KEY = CONTEXT_KEYS[0] if CONTEXT_KEYS is not None else None
# A SpanContext can be read and built by position (no property calls, no re-validation).
SPAN_CONTEXT_IS_TUPLE = _span_context_is_tuple() if PROBES_ON else False
# The runtime context's variable: the current context read and set in one step each.
CONTEXT_VARIABLE = _context_variable() if PROBES_ON else None
# Whether a global tracer provider is set can be read without get_tracer_provider(), which reads
# os.environ on every call until one is set.
PROVIDER_ATTRIBUTE = _provider_attribute() if PROBES_ON else None


if CONTEXT_VARIABLE is not None:
    current_context: Callable[[], Context] = CONTEXT_VARIABLE.get
    attach: Callable[[Context], Any] = CONTEXT_VARIABLE.set
    _reset = CONTEXT_VARIABLE.reset

    def detach(token: Any) -> None:
        """Put back the context a token was attached over (the API's ``detach``, which logs a failure)."""
        try:
            _reset(token)
        except Exception:
            context.detach(token)  # the API's own way: it logs what went wrong
else:
    current_context = context.get_current
    attach = context.attach
    detach = context.detach


def suppression_keys() -> tuple[Any, ...] | None:
    """The context keys whose truthy value means "do not instrument" (None: ask
    :func:`is_instrumentation_enabled`); the per-call check reads them inline (``Plan.admit``)."""
    return SUPPRESSION_KEYS


def span_of(current: Context) -> Span | None:
    """The span kept in ``current`` (None: no span)."""
    if CONTEXT_KEYS is not None:
        return current.get(CONTEXT_KEYS[0])  # type: ignore[return-value]
    span = trace.get_current_span(current)
    return None if span is trace.INVALID_SPAN else span


def with_values(current: Context, span: Span | None, baggage_entry: tuple[str, str] | None, key: str, value: Any) -> Context:
    """``current`` with ``span`` as its span (when given), one baggage entry added, and ``key`` set to ``value``."""
    keys = CONTEXT_KEYS
    if keys is None:
        ctx = current if span is None else trace.set_span_in_context(span, current)
        if baggage_entry is not None:
            ctx = baggage.set_baggage(baggage_entry[0], baggage_entry[1], ctx)
        return context.set_value(key, value, ctx)
    merged = dict(current)
    if span is not None:
        merged[keys[0]] = span
    if baggage_entry is not None:
        entries = current.get(keys[1])
        entries = dict(entries) if isinstance(entries, dict) else {}
        entries[baggage_entry[0]] = baggage_entry[1]
        merged[keys[1]] = entries
    merged[key] = value
    return Context(merged)


def parents_in(current: Context) -> Callable[[Span], Context]:
    """A maker of ``current`` with one span after another as its span (a health pass parents each
    verdict's span to its dispatch), the context's other values copied once."""
    keys = CONTEXT_KEYS
    if keys is None:
        return lambda span: trace.set_span_in_context(span, current)
    values, span_key = dict(current), keys[0]

    def parent(span: Span) -> Context:
        values[span_key] = span
        return Context(values)

    return parent


def span_context(trace_id: int, span_id: int, sampled: bool | int) -> SpanContext:
    """A valid, local span context of ids this process made itself (``sampled``: a bool, or the
    trace flags' sampled bit)."""
    if trace_id and span_id and _NEW_SPAN_CONTEXT is not None:
        return _NEW_SPAN_CONTEXT((trace_id, span_id, False, _TRACE_FLAGS[sampled], DEFAULT_TRACE_STATE, True))
    return SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False, trace_flags=_TRACE_FLAGS[sampled])


# Readers of a span context's trace id, span id and trace flags, for C-level maps over many of them.
if SPAN_CONTEXT_IS_TUPLE:
    trace_id_of: Callable[[SpanContext], int] = operator.itemgetter(0)
    span_id_of: Callable[[SpanContext], int] = operator.itemgetter(1)
    trace_flags_of: Callable[[SpanContext], int] = operator.itemgetter(3)
else:
    trace_id_of = operator.attrgetter("trace_id")
    span_id_of = operator.attrgetter("span_id")
    trace_flags_of = operator.attrgetter("trace_flags")


_TRACE_FLAGS = (TraceFlags(0), TraceFlags(1))
# A SpanContext built by position, at C speed (None: through its constructor).
_NEW_SPAN_CONTEXT: Callable[[tuple[Any, ...]], SpanContext] | None = (
    partial(tuple.__new__, SpanContext) if SPAN_CONTEXT_IS_TUPLE else None
)
