"""``isolate``: a request boundary that runs in an empty OpenTelemetry context."""

from __future__ import annotations

from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.role.base import CallInFlight, Role, RoleCall


class IsolateRole(Role):
    """A request boundary: the call runs in an empty OpenTelemetry context, with no gym call active.

    uvicorn can start a keep-alive connection's next request inside the context of the previous
    one (its task is created from a transport callback that ran in that context); the ASGI
    middleware would then parent the request to the previous request's ended span and ignore
    its own ``traceparent`` and ``baggage``, so a verify would carry another rollout's id.
    """

    name = semconv.ROLE_ISOLATE
    decorated = False

    def spanless_context(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        return Context()  # empty: the request is traced from its own headers
