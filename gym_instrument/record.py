"""Spans and metrics, with the OpenTelemetry API only.

Everything that touches a tracer or a meter lives here: finding out whether anything records
at all (cheaply, per call), checking attribute values against what OpenTelemetry and an OTLP
exporter accept, ending spans with the error rules, and the bounded metrics: counted per call
in tallies (one C-level call each) that observable counters read when the meter provider
collects. The few OpenTelemetry internals this relies on for speed are probed in ``compat``.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Span, Status, StatusCode

from gym_instrument import semconv
from gym_instrument.compat import PROVIDER_ATTRIBUTE, span_of
from gym_instrument.version import __version__

_LOG = logging.getLogger("gym_instrument")
_SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def utf8_safe(text: str) -> str:
    """The string itself when it encodes as UTF-8; else with lone surrogates replaced.

    An OTLP exporter drops its whole batch on one string that is not valid UTF-8.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _clean_scalar(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return utf8_safe(value)
    if kind is bool or kind is float:
        return value
    if kind is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else None
    if isinstance(value, str):  # subclasses: use the plain string, not a custom __str__
        return utf8_safe(str.__str__(value))
    return None


def clean_value(value: Any) -> Any:
    """A valid OpenTelemetry attribute value an OTLP exporter can encode, or None to drop it."""
    cleaned = _clean_scalar(value)
    if cleaned is not None or value is None:
        return cleaned
    if isinstance(value, (list, tuple)):
        items = [_clean_scalar(item) for item in value]
        kinds = {type(item) for item in items}
        if None in items or len(kinds) > 1:
            return None  # mixed or unencodable items: OpenTelemetry wants one type per sequence
        return tuple(items)
    return None


def clean_attributes(attributes: Mapping[str, Any], into: dict[str, Any]) -> None:
    """Copy the attributes that fit into ``into``; drop (with a debug line) those that do not."""
    for key, value in attributes.items():
        kind = type(value)
        if (
            type(key) is str
            and key.isascii()
            and key
            and (
                kind is bool
                or kind is float
                or (kind is str and value.isascii())
                or (kind is int and _INT64_MIN <= value <= _INT64_MAX)
            )
        ):
            into[key] = value  # the usual case, already valid and encodable: copied as is
            continue
        if not isinstance(key, str) or not key:
            continue
        cleaned = clean_value(value)
        if cleaned is None:
            _LOG.debug("gym_instrument: dropped attribute %r: not a valid OpenTelemetry value", utf8_safe(key))
            continue
        into[utf8_safe(key)] = cleaned


def error_type(exception: BaseException) -> str:
    kind = type(exception)
    module = getattr(kind, "__module__", None)
    return kind.__qualname__ if module in (None, "builtins") else f"{module}.{kind.__qualname__}"


class _Once:
    """Logs a failing callable once, not once per call."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def failed(self, what: str, culprit: object) -> None:
        if id(culprit) in self._seen:
            return
        self._seen.add(id(culprit))
        try:
            name = getattr(culprit, "__qualname__", None) or type(culprit).__qualname__
        except Exception:
            name = type(culprit).__qualname__
        # Where it failed, never what it said: an exception's message can quote the row it choked
        # on (pydantic's ValidationError does), and row content stays out of logs at every level.
        error = sys.exc_info()[1]
        kind = utf8_safe(error_type(error)) if error is not None else "an exception"
        frames = traceback.format_list(traceback.extract_tb(error.__traceback__)) if error is not None else []
        _LOG.warning(
            "gym_instrument: %s %s raised %s; it is skipped for this call\n%s", what, name, kind, "".join(frames).rstrip()
        )


FAILURES = _Once()


class FrameworkSpan(Span):
    """A framework's own span of the same meaning as ours, which this package writes to and never ends.

    When the call being traced already runs inside a recording span of the role's name made by
    the framework itself (NeMo Gym 0.7.0's ``gym.verify`` around ``/verify``), the role's
    attributes go on that span instead of a second one of the same name. The framework ends it;
    :meth:`Recorder.end_span` marks an exception on it (``error.type``, status ERROR) but records
    no exception event, which the framework's own span does when the exception reaches it.
    """

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def end(self, end_time: int | None = None) -> None:
        pass  # the framework's to end

    def get_span_context(self) -> trace.SpanContext:
        return self.span.get_span_context()

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self.span.add_event(name, attributes, timestamp)

    def update_name(self, name: str) -> None:
        pass  # the framework's span keeps its name

    def is_recording(self) -> bool:
        return self.span.is_recording()

    def set_status(self, status: Any, description: str | None = None) -> None:
        self.span.set_status(status, description)

    def record_exception(
        self, exception: BaseException, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        self.span.record_exception(exception, attributes, timestamp, escaped)


def framework_span(current: Context, span_name: str) -> Span | None:
    """The span of ``current`` when it is recording, named ``span_name`` and made by another
    instrumentation than this package (a framework's own telemetry); else None."""
    span = span_of(current)
    if span is None or getattr(span, "name", None) != span_name or not span.is_recording():
        return None
    scope = getattr(span, "instrumentation_scope", None)
    if scope is not None and getattr(scope, "name", None) == semconv.INSTRUMENTATION_NAME:
        return None  # ours: a nested call of another object starts its own span
    return span


class Recorder:
    """The tracer and the metric tallies one ``instrument()`` (or one decorator) records with."""

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.cached_tracer: trace.Tracer | None = None  # once resolved
        self.tallies = tallies_for(meter_provider)
        self._provider_from_environment = OTEL_PYTHON_TRACER_PROVIDER in os.environ

    # -- tracing -------------------------------------------------------------------------------

    def tracer(self) -> trace.Tracer | None:
        """The tracer, or None when nothing would record (no SDK). Suppression is the caller's check."""
        tracer = self.cached_tracer
        if tracer is not None:
            return tracer
        if (
            self._tracer_provider is None
            and not self._provider_from_environment
            and PROVIDER_ATTRIBUTE is not None  # the API's global-provider attribute, probed in compat
            and getattr(trace, PROVIDER_ATTRIBUTE, trace) is None
        ):
            # No global provider is set yet: known without get_tracer_provider(), which reads
            # os.environ on every call until one is set (most of a call's cost with no SDK).
            return None
        return self._resolve_tracer()

    def _resolve_tracer(self) -> trace.Tracer | None:
        provider = self._tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None  # no SDK yet: checked again on the next call, so a later SDK is picked up
        tracer = trace.get_tracer(semconv.INSTRUMENTATION_NAME, __version__, provider, schema_url=_SCHEMA_URL)
        if isinstance(tracer, trace.NoOpTracer):
            return None
        self.cached_tracer = tracer
        return tracer

    @staticmethod
    def end_span(span: Span, exception: BaseException | None, cancelled: bool = False) -> None:
        if exception is not None and span.is_recording():
            if cancelled:
                span.set_attribute(semconv.ERROR_TYPE, semconv.ERROR_TYPE_CANCELLED)
                span.set_status(Status(StatusCode.ERROR, "cancelled"))
            else:
                kind = error_type(exception)
                try:
                    message: str | None = str(exception)
                except Exception:
                    message = None
                safe = message is not None and utf8_safe(message) is message and utf8_safe(kind) is kind
                if not safe:
                    # str() raises, or says something OTLP cannot carry (one such string makes the
                    # exporter drop its whole batch): the same facts, from values that are safe.
                    message = utf8_safe(message) if message is not None else f"<{type(exception).__name__}: str() failed>"
                    kind = utf8_safe(kind)
                if type(span) is not FrameworkSpan:  # a framework's span records what reaches it itself
                    if safe:
                        span.record_exception(exception, escaped=True)
                    else:
                        stacktrace = utf8_safe(
                            "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
                        )
                        span.add_event(
                            "exception",
                            {
                                "exception.type": kind,
                                "exception.message": message,
                                "exception.stacktrace": stacktrace,
                                "exception.escaped": "True",
                            },
                        )
                span.set_attribute(semconv.ERROR_TYPE, kind)
                span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {message}"[:256]))
        span.end()

    # -- metrics (bounded attributes only: never ids, rewards or free text) ----------------------

    def count(self, metric: str, attributes: Mapping[str, str] | None = None, amount: int = 1) -> None:
        """Add ``amount`` to a metric point (the rare counts: verdicts per health pass, evictions)."""
        try:
            self.tallies.of(metric, attributes).add(amount)
        except Exception:
            FAILURES.failed("metric", self.count)


class Tally:
    """One metric point's running count, read by its observable counter's callback.

    A call adds one with ``next(tally.ticks)``: a single C-level call on an ``itertools.count``,
    atomic under the GIL, with no lock and nothing looked up (0.04 us, ``make bench``'s ``parts``).
    A synchronous ``Counter.add`` costs 4.6 us there under an SDK meter provider (measurement,
    attribute set, aggregation lock), which a zero-code run has. Larger amounts (a health pass's verdicts,
    evictions) go through :meth:`add`. Each read takes one tick itself, which :meth:`value` subtracts.
    """

    __slots__ = ("_extra", "_lock", "_reads", "attributes", "ticks")

    def __init__(self, attributes: Mapping[str, str] | None) -> None:
        self.attributes = attributes
        self._lock = threading.Lock()
        self.ticks = itertools.count()
        self._reads = 0
        self._extra = 0

    def restart(self) -> None:
        """Count from zero again (in a forked child), with a fresh lock."""
        self._lock = threading.Lock()
        self._reads = next(self.ticks) + 1  # so that the next read, which takes a tick itself, is 0
        self._extra = 0

    def add(self, amount: int) -> None:
        with self._lock:
            self._extra += amount

    def value(self) -> int:
        with self._lock:
            value = next(self.ticks) - self._reads + self._extra
            self._reads += 1
        return value


_METRICS: dict[str, tuple[str, str, tuple[Mapping[str, str] | None, ...]]] = {
    # name: (unit, description, the attribute sets it is counted under)
    semconv.METRIC_REWARDED: ("{rollout}", "Verifies that put a numeric, unmasked reward on their span", (None,)),
    semconv.METRIC_DISPATCHES: (
        "{rollout}",
        "Rollout dispatches by outcome (ok, error, cancelled)",
        tuple({semconv.OUTCOME: outcome} for outcome in (semconv.OUTCOME_OK, semconv.OUTCOME_ERROR, semconv.OUTCOME_CANCELLED)),
    ),
    semconv.METRIC_VERDICTS: (
        "{rollout}",
        "Health verdicts of traced rollouts by verdict",
        tuple({"verdict": verdict} for verdict in (*sorted(semconv.KNOWN_VERDICTS), semconv.VERDICT_OTHER)),
    ),
    semconv.METRIC_LINK_EVICTIONS: (
        "{span}",
        "Remembered dispatch spans evicted at capacity before their health verdict",
        (None,),
    ),
}


class Tallies:
    """Every metric point of one meter provider, each a :class:`Tally`, by metric and attributes
    (shared by the recorders of that provider, :func:`tallies_for`).

    The per-call ones are attributes too, so that the engine adds one with one ``next()``:
    ``ok``, ``error`` and ``cancelled`` (dispatches by outcome) and ``rewarded``.
    """

    def __init__(self) -> None:
        self.points: dict[str, dict[tuple[tuple[str, str], ...], Tally]] = {
            metric: {_point_key(attributes): Tally(attributes) for attributes in attribute_sets}
            for metric, (_, _, attribute_sets) in _METRICS.items()
        }
        dispatches = self.points[semconv.METRIC_DISPATCHES]
        self.ok = dispatches[((semconv.OUTCOME, semconv.OUTCOME_OK),)].ticks
        self.error = dispatches[((semconv.OUTCOME, semconv.OUTCOME_ERROR),)].ticks
        self.cancelled = dispatches[((semconv.OUTCOME, semconv.OUTCOME_CANCELLED),)].ticks
        self.rewarded = self.points[semconv.METRIC_REWARDED][()].ticks

    def of(self, metric: str, attributes: Mapping[str, str] | None) -> Tally:
        return self.points[metric][_point_key(attributes)]  # (a set no metric declares: KeyError, logged by count)


def _point_key(attributes: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(attributes.items())) if attributes else ()


# The tallies of each meter provider recorders record to (weakly: a provider that is gone counts
# nothing), and of the global one, whenever it is set: one set each, shared by every recorder of
# that provider, so that instrument() after uninstrument() goes on counting where the last one
# stopped (the counters are cumulative). An SDK meter keeps the first observable instrument of a
# name and ignores the callbacks of a later registration (the API's proxy instrument, made when
# the global provider is set, may come second), so every callback reports the same thing
# whoever registered it: the sums over every set of tallies that records to the provider it is
# called for.
_BY_PROVIDER: weakref.WeakKeyDictionary[metrics.MeterProvider, Tallies] = weakref.WeakKeyDictionary()
_GLOBAL: list[Tallies] = []  # the global provider's, once made
_REGISTRY_LOCK = threading.Lock()


def _each_tallies() -> list[tuple[metrics.MeterProvider | None, Tallies]]:
    with _REGISTRY_LOCK:
        return [*_BY_PROVIDER.items(), *((None, tallies) for tallies in _GLOBAL)]


def _observe(
    metric: str, provider: weakref.ref[metrics.MeterProvider] | None
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        target = metrics.get_meter_provider() if provider is None else provider()
        if target is None:
            return []
        sums: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        for owner, tallies in _each_tallies():
            if (metrics.get_meter_provider() if owner is None else owner) is not target:
                continue
            for key, tally in tallies.points[metric].items():
                value = tally.value()
                if value:
                    point = sums.setdefault(key, [0, tally.attributes])
                    point[0] += value
        return [Observation(value, attributes) for value, attributes in sums.values()]

    return callback


def tallies_for(meter_provider: metrics.MeterProvider | None) -> Tallies:
    """The tallies of recorders of ``meter_provider`` (None: the global one), counted into its
    observable counters. A provider they cannot be registered with (one that cannot be weakly
    referenced, or whose meter raises) gets tallies of its own that nothing reads, logged once."""
    try:
        with _REGISTRY_LOCK:
            known = _BY_PROVIDER.get(meter_provider) if meter_provider is not None else (_GLOBAL[0] if _GLOBAL else None)
            if known is not None:
                return known
            tallies = Tallies()
            owner = None if meter_provider is None else weakref.ref(meter_provider)
            if meter_provider is None:
                _GLOBAL.append(tallies)
            else:
                _BY_PROVIDER[meter_provider] = tallies
        # With no SDK yet, the API's proxy instruments start observing once a meter provider is set.
        provider = meter_provider or metrics.get_meter_provider()
        meter = metrics.get_meter(semconv.INSTRUMENTATION_NAME, __version__, provider, schema_url=_SCHEMA_URL)
        for metric, (unit, description, _) in _METRICS.items():
            meter.create_observable_counter(metric, [_observe(metric, owner)], unit=unit, description=description)
        return tallies
    except Exception:
        FAILURES.failed("metric instruments of", tallies_for)
        return Tallies()


def _forget_in_forked_child() -> None:
    """A forked child's counts start from zero: the parent's are the parent's to report (and a lock
    another thread held at the fork is never released in the child)."""
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for _, tallies in _each_tallies():
        for points in tallies.points.values():
            for tally in points.values():
                tally.restart()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)
