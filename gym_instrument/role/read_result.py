"""``read_result``: a read of a response's body that ends the dispatch the response answered.

NeMo Gym's collector POSTs a rollout to ``/run``, gets the response back (the dispatch target
returns there), and reads its body (the rollout's result, with its token usage) afterwards, in
``get_response_json``. A dispatch whose schema says its result is such a response
(``body_read_later``) hands its open span here (:func:`hold`); the read of that response's body
ends it with the totals the body carries. A response dropped unread ends its dispatch when it is
collected (``weakref.finalize``), without totals. No span of its own.
"""

from __future__ import annotations

import weakref
from typing import Any

from gym_instrument import semconv
from gym_instrument.role.base import Emission, Pending, Role, RoleCall

# Dispatches waiting for their response's body, by the response's id(): whoever pops an entry
# ends it (the read, or the response's finalizer), so it ends once. A finalizer runs before its
# object's memory is freed, so an id is never reused while its entry waits.
_WAITING: dict[int, Pending] = {}


def _abandoned(key: int) -> None:
    pending = _WAITING.pop(key, None)
    if pending is not None:
        pending.abandon()


def hold(response: Any, pending: Pending) -> bool:
    """Let the read of ``response``'s body end ``pending``; False when it cannot be watched (ends now)."""
    key = id(response)
    try:
        weakref.finalize(response, _abandoned, key)
    except TypeError:  # not weakly referenceable: nothing could end it later
        return False
    _WAITING[key] = pending
    return True


def waiting() -> int:
    """How many dispatches wait for their response's body."""
    return len(_WAITING)


class ReadResultRole(Role):
    """A function that reads a response's body (its first argument) and returns it parsed."""

    name = semconv.ROLE_READ_RESULT
    row_names = ("response",)
    decorated = False

    def emit(self, emission: Emission, call: RoleCall, result: Any) -> None:
        pending = _WAITING.pop(id(emission.row), None)
        if pending is not None:
            pending.complete(result)
