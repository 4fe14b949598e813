"""``inject``: a client call that sends a request; the current context goes into its headers.

No span: the call's ``headers`` keyword argument becomes a copy of the caller's with the current
trace context and baggage injected through the configured global propagators (``OTEL_PROPAGATORS``:
W3C trace context and baggage by default). Nothing is injected when propagation is off, when an
OpenTelemetry HTTP client instrumentation of contrib is active for the target's HTTP client (its
own client span injects; see :data:`CLIENT_INSTRUMENTATIONS`), or when the caller's headers already
carry a ``traceparent``: a request never carries two.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.role.base import Hops, Role, RoleCall

# The HTTP client library a schema names -> contrib's instrumentor of it (module, class).
CLIENT_INSTRUMENTATIONS: dict[str, tuple[str, str]] = {
    "aiohttp": ("opentelemetry.instrumentation.aiohttp_client", "AioHttpClientInstrumentor"),
    "httpx": ("opentelemetry.instrumentation.httpx", "HTTPXClientInstrumentor"),
    "requests": ("opentelemetry.instrumentation.requests", "RequestsInstrumentor"),
    "urllib3": ("opentelemetry.instrumentation.urllib3", "URLLib3Instrumentor"),
}


def contrib_client_active(client: str | None) -> bool:
    """Whether contrib's instrumentation of ``client`` (None: of any client it knows) is instrumented.

    Read from the instrumentor's own singleton (``BaseInstrumentor``), only when its module has
    been imported: a process that never loaded it pays one dictionary lookup."""
    names = (client,) if client is not None else tuple(CLIENT_INSTRUMENTATIONS)
    modules = sys.modules
    for name in names:
        where = CLIENT_INSTRUMENTATIONS.get(name)
        if where is None:
            continue
        module = modules.get(where[0])
        if module is None:
            continue
        instrumentor = getattr(module, where[1], None)
        instance = getattr(instrumentor, "_instance", None)
        if instance is not None and getattr(instance, "_is_instrumented_by_opentelemetry", False) is True:
            return True
    return False


def _has_traceparent(headers: Any) -> bool:
    try:
        for key in headers:
            if type(key) is str and key.lower() == "traceparent":
                return True
    except Exception:
        return True  # headers that cannot be read are left alone
    return False


class InjectRole(Role):
    """A client call: the current context is injected into a copy of its ``headers`` keyword argument."""

    name = semconv.ROLE_INJECT
    decorated = False

    def prepare(
        self,
        call: RoleCall,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        current: Context,
        hops: Hops,
    ) -> Context | None:
        if not hops.propagation or contrib_client_active(call.schema.http_client):
            return None
        given = kwargs.get("headers")
        headers: Any
        if given is None:
            headers = {}
        elif not isinstance(given, MutableMapping) or _has_traceparent(given):
            return None  # a traceparent of the caller's, or headers of another shape: left as given
        elif type(given) is dict:
            headers = dict(given)  # a copy: the caller's object is never changed
        else:
            # A multi-value mapping (aiohttp's CIMultiDict) copies itself, repeated headers included.
            copy = getattr(given, "copy", None)
            headers = copy() if callable(copy) else None
            if not isinstance(headers, MutableMapping) or headers is given:
                return None
        propagate.inject(headers, context=current)
        if headers:
            kwargs["headers"] = headers
        return None
