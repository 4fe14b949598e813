"""Ending spans by the error rules, and writing to a framework's own span.

The rules a call's span ends by (an exception: status ERROR, ``error.type``, the exception
recorded; a cancellation: ``error.type`` = ``cancelled``; a failure that came back as data:
status ERROR with its type) live here once, for live spans and replayed ones alike.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode

from gym_instrument import semconv
from gym_instrument.compat import span_of
from gym_instrument.record.attributes import utf8_safe
from gym_instrument.record.failures import FAILURES, error_type

_LOG = logging.getLogger("gym_instrument")


class FrameworkSpan(Span):
    """A framework's own span of the same meaning as ours, which this package writes to and never ends.

    When the call being traced already runs inside a recording span of the role's name made by
    the framework itself (NeMo Gym 0.7.0's ``gym.verify`` around ``/verify``), the role's
    attributes go on that span instead of a second one of the same name. The framework ends it;
    :meth:`Recorder.end_span` marks an exception on it (``error.type``, status ERROR) but records
    no exception event, which the framework's own span does when the exception reaches it.

    An attribute the framework already set on its span is never overwritten (newer NeMo Gym
    stamps ``nemo.gym.task.id`` with its task *index*): its value stays, and a different value of
    ours is left out and logged once per span name and attribute, by name (values are row content).
    """

    __slots__ = ("ours", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.ours: set[str] = set()  # the attributes this package set here; it may set them again

    def end(self, end_time: int | None = None) -> None:
        pass  # the framework's to end

    def get_span_context(self) -> trace.SpanContext:
        return self.span.get_span_context()

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        theirs = getattr(self.span, "attributes", None)
        if isinstance(theirs, Mapping) and theirs:
            attributes = {key: value for key, value in attributes.items() if self._ours_to_set(key, value, theirs)}
        self.ours.update(attributes)
        self.span.set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.set_attributes({key: value})

    def _ours_to_set(self, key: str, value: Any, theirs: Mapping[str, Any]) -> bool:
        if key in self.ours or key not in theirs:
            return True
        name = getattr(self.span, "name", None)
        if theirs[key] != (tuple(value) if isinstance(value, list) else value) and FAILURES.first(
            "kept the framework's attribute", f"{name} {key}"
        ):
            scope = getattr(getattr(self.span, "instrumentation_scope", None), "name", None)
            _LOG.warning(
                "gym_instrument: the framework's own span %s (from %s) already has %s; kept its value and left out "
                "this package's, which differs (logged once)",
                utf8_safe(str(name)),
                utf8_safe(str(scope)),
                utf8_safe(key),
            )
        return False

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


def end_span(span: Span, exception: BaseException | None, cancelled: bool = False, end_time: int | None = None) -> None:
    """End a call's span: with the exception's facts when it raised (or ``cancelled``), else as it is."""
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
    span.end(end_time)


def end_failed(span: Span, kind: str, end_time: int | None = None) -> None:
    """End a span whose call failed without raising (a failure returned as data, a failed attempt
    read from a run's files): status ERROR with ``kind`` as its description and ``error.type``."""
    span.set_attribute(semconv.ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, kind))
    span.end(end_time)
