"""``hand_off``: a call that hands work to another thread; the work runs in the caller's context.

No span. A thread that runs an executor's work starts from a context of its own, never the caller's:
``loop.run_in_executor`` copies no context (unlike ``asyncio.to_thread``), so a verify that a
server runs in an executor (OpenEnv's server runs ``Environment.step`` so) would be a root span,
with no rollout id, in no rollout's trace. The call's work (its row: ``fn``, as
``ThreadPoolExecutor.submit`` names it, else ``func``, as ``run_in_executor`` does, else its first
argument) is handed on wrapped, so that it runs in the OpenTelemetry context the call was made in,
and the thread's own is put back after it, whatever it returned or raised. Work handed on from an
empty context, a coroutine function (which ``run_in_executor`` refuses, and must still refuse) and
anything not callable are handed on as given.
"""

from __future__ import annotations

import inspect
from typing import Any

from opentelemetry.context import Context

from gym_instrument.compat import attach, detach
from gym_instrument.role.base import CallInFlight, Role, RoleCall


class InContext:
    """``work`` called in ``context``, in whichever thread calls it: its result and its exception are its own."""

    __slots__ = ("__wrapped__", "context")

    def __init__(self, work: Any, context: Context) -> None:
        self.__wrapped__ = work
        self.context = context

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        token = attach(self.context)
        try:
            return self.__wrapped__(*args, **kwargs)
        finally:
            detach(token)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)  # what a slow-callback warning or a log names: the work itself


class HandOffRole(Role):
    """A call that hands work to another thread (an executor): the work runs in the caller's context."""

    name = "hand_off"
    row_names = ("fn", "func")
    decorated = False

    def prepare(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        row, current = flight.row, flight.current
        if not current or type(row) is InContext or not callable(row):
            return None  # nothing to carry, carried already, or not work at all: handed on as given
        if inspect.iscoroutinefunction(row) or getattr(row, "_is_coroutine", None) is not None:
            return None  # asyncio's own marker too: run_in_executor refuses it, as before
        return flight.replace_row(InContext(row, current))
