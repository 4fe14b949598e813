"""``inject``: a client call that sends a request or opens a session; the current context goes into its headers.

No span: the call's headers argument (its row: ``headers`` unless the target names another, as
websockets' ``connect`` takes ``additional_headers`` for a WebSocket's opening handshake; by keyword
or by position) becomes a copy of the caller's with the current trace context and baggage injected
through the configured global propagators (``OTEL_PROPAGATORS``: W3C trace context and baggage by
default). Nothing is injected when propagation is off or when the caller's headers already carry a
``traceparent``: a request never carries two.

It injects whether or not an OpenTelemetry HTTP client instrumentation of contrib is on, because
contrib skips some requests (a session made before its ``instrument()``, a URL its
``OTEL_PYTHON_*_EXCLUDED_URLS`` names). A request contrib does handle gets contrib's client span's
context, which replaces these headers (its propagator sets each header, it never adds a second):
the request carries one ``traceparent``, its client span's.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.role.base import CallInFlight, Hops, Role, RoleCall


def _has_traceparent(headers: Any) -> bool:
    try:
        for key in headers:
            if type(key) is str and key.lower() == "traceparent":
                return True
    except Exception:
        return True  # headers that cannot be read are left alone
    return False


def headers_carrying(row: Any, current: Context, hops: Hops) -> Any:
    """The headers the call is made with: a copy of ``row`` with ``current`` injected, or ``row``
    itself (left as given)."""
    if not hops.propagation:
        return row
    headers: Any
    if row is None:  # (no headers argument)
        headers = {}
    elif not isinstance(row, MutableMapping) or _has_traceparent(row):
        return row  # a traceparent of the caller's, or headers of another shape: left as given
    elif type(row) is dict:
        headers = dict(row)  # a copy: the caller's object is never changed
    else:
        # A multi-value mapping (aiohttp's CIMultiDict, websockets' Headers) copies itself, repeated headers included.
        copy = getattr(row, "copy", None)
        headers = copy() if callable(copy) else None
        if not isinstance(headers, MutableMapping) or headers is row:
            return row
    propagate.inject(headers, context=current)
    return headers if headers else row


class InjectRole(Role):
    """A client call: the current context is injected into a copy of its headers argument."""

    name = semconv.ROLE_INJECT
    row_names = ("headers",)
    row_by_name = True  # never the call's first argument (a method, a URL) in their place
    decorated = False

    def prepare(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        return flight.replace_row(headers_carrying(flight.row, flight.current, flight.setup.hops))
