"""``receive``: a server's request boundary that runs in the context the request carries.

Like ``isolate``, the call starts from an empty OpenTelemetry context (a keep-alive connection's
next request is never traced inside the previous one); unlike it, the trace context and baggage
the request's headers carry are extracted into that context through the configured global
propagators, so what the request causes (a verify) joins the trace of the rollout that sent it.
No span is made for the hop. Nothing is extracted when propagation is off or when contrib's
ASGI middleware (FastAPI's instrumentation puts it at the top of the application's middleware
stack) makes the server span of this request: its span extracts, and it makes a SERVER span only
when no span is current (``_start_internal_or_server_span``), so an extracted parent would turn it
INTERNAL. A request whose URL that middleware excludes (``excluded_urls``,
``OTEL_PYTHON_FASTAPI_EXCLUDED_URLS``) gets no span of contrib's, and FastAPI's own telemetry
steps back wherever contrib's middleware is: its context is extracted here, so what it causes
still joins the rollout's trace.
With the server_telemetry setting off, the entries of the schema's ``quiet_server_scope`` are put
in the request's scope first: the server framework's own telemetry leaves the request alone.

The target is either a request cycle's method whose instance keeps the ASGI scope in ``scope`` and
whose first argument is the application (uvicorn's ``RequestResponseCycle.run_asgi(self, app)``),
or an ASGI application itself, called ``(scope, receive, send)``. The scope's ``headers`` are a
list of ``(name, value)`` byte pairs; the application may sit behind middleware that keeps the
next one in ``app``.

A request is received once, at its first boundary (its scope is marked): an application called
again inside it runs in the context it is given, the server span of FastAPI's own telemetry
current. A WebSocket session (scope type ``websocket``) is one call of the application, from its opening
handshake, whose headers the scope holds, to its close: every frame the server handles in the
session runs in the context the handshake carried, and no span is made for the session. (Work the
server hands to an executor thread keeps that context through a ``hand_off`` target; a session whose
client sends no headers can carry it in its first frame instead: ``receive_frame``, in ``frame``.)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter

from gym_instrument import semconv
from gym_instrument.record.failures import FAILURES
from gym_instrument.role.base import CallInFlight, Role, RoleCall

_EMPTY = Context()
_MIDDLEWARE_DEPTH = 8  # how far the chain of ``.app`` attributes is followed
_NOT_STARLETTE = object()
_CONTRIB_ASGI = "opentelemetry.instrumentation.asgi"  # where contrib's middleware (and FastAPI's instrumentation's) comes from
# Marks a request's scope at its first boundary. A boundary reached again inside the same request
# (FastAPI.__call__ calls Starlette.__call__, both reached by one target on the base class) leaves
# the request's context alone: the call-context guard cannot tell, as FastAPI's own telemetry
# attaches a fresh context, with its server span, between the two.
_RECEIVED = "gym_instrument.received"


class _ScopeHeaders(Getter[list[tuple[bytes, bytes]]]):
    """Reads an ASGI scope's ``headers`` (lower-case byte names) for a propagator."""

    def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
        name = key.lower().encode("latin-1")
        values = [value.decode("latin-1") for header, value in carrier if header == name]
        return values or None

    def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


_GETTER = _ScopeHeaders()


def contrib_makes_server_span(app: Any, scope: dict[str, Any]) -> bool:
    """Whether contrib's ASGI middleware makes the server span of the request ``scope`` describes.

    The middleware (``OpenTelemetryMiddleware``) is looked for down the chain of ``.app``, through a
    Starlette application's built ``middleware_stack`` (FastAPI's instrumentation puts it there;
    its marker on the application is not enough: it stays when the stack was built without the
    middleware); it makes the span unless the request's URL is one it excludes, by its own list and
    its own reading of the URL. An application whose stack is not built yet (a first request with
    the lifespan off) is contrib's when contrib marked it (``_is_instrumented_by_opentelemetry``).
    """
    if _CONTRIB_ASGI not in sys.modules:
        return False  # its middleware cannot be anywhere: one lookup, not a walk down the stack
    for _ in range(_MIDDLEWARE_DEPTH):
        if app is None:
            return False
        if type(app).__name__ == "OpenTelemetryMiddleware":
            return _handles(app, scope)
        stack = getattr(app, "middleware_stack", _NOT_STARLETTE)  # a Starlette application: its middleware, once built
        if stack is _NOT_STARLETTE:
            app = getattr(app, "app", None)
        elif stack is None:
            return getattr(app, "_is_instrumented_by_opentelemetry", False) is True
        else:
            app = stack
    return False


def _handles(middleware: Any, scope: dict[str, Any]) -> bool:
    """Whether contrib's ASGI ``middleware`` makes a span for ``scope`` (it skips what it excludes)."""
    excluded = getattr(middleware, "excluded_urls", None)
    if not excluded:
        return True
    try:
        # Contrib's own reading of the request's URL, from the middleware's own module.
        url_of = getattr(sys.modules.get(type(middleware).__module__), "get_host_port_url_tuple", None)
        if url_of is None:
            return True  # a contrib that reads URLs otherwise: its span, as before it excluded any
        return not excluded.url_disabled(url_of(scope)[2])
    except Exception:
        FAILURES.failed("reading contrib's excluded URLs at", "a request boundary")
        return True


def extracted(headers: Iterable[tuple[bytes, bytes]]) -> Context:
    """The context the request's headers carry, from an empty one."""
    carrier = headers if isinstance(headers, list) else list(headers)
    return propagate.extract(carrier, context=_EMPTY, getter=_GETTER)


def _scope_and_application(flight: CallInFlight) -> tuple[dict[str, Any] | None, Any]:
    """The request's ASGI scope (None: none to read) and the application that serves it."""
    instance, args, kwargs = flight.instance, flight.args, flight.kwargs
    first = args[0] if args else kwargs.get("app", kwargs.get("scope"))
    scope: Any
    if type(first) is dict:  # an ASGI application called (scope, receive, send)
        scope, app = first, instance
    else:  # a request cycle's method called with the application
        scope, app = getattr(instance, "scope", None), first
    return (scope if type(scope) is dict else None), app


def handshake_scope(flight: CallInFlight) -> dict[str, Any] | None:
    """The ASGI scope of the request (or WebSocket session) a receive target's call serves, if any."""
    return _scope_and_application(flight)[0]


class ReceiveRole(Role):
    """A request boundary: an empty context, with the request's trace context and baggage in it."""

    name = semconv.ROLE_RECEIVE
    decorated = False

    def prepare(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        hops = flight.setup.hops
        quiet = () if hops.server_telemetry else call.schema.quiet_server_scope
        if not hops.propagation and not quiet:
            return _EMPTY
        try:
            scope, app = _scope_and_application(flight)
            if scope is None:
                return _EMPTY
            if _RECEIVED in scope:
                return None  # a boundary inside the request's first one: it runs in the context it is given
            scope[_RECEIVED] = True
            for key, value in quiet:
                scope.setdefault(key, value)  # (a key already there is the server's own, kept)
            if not hops.propagation or contrib_makes_server_span(app, scope):
                return _EMPTY
            headers = scope.get("headers")
            return extracted(headers) if headers else _EMPTY
        except Exception:
            FAILURES.failed("reading the request's context at", call.where)
            return _EMPTY  # a request that cannot be read still runs isolated
