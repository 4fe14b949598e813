"""``read_result``: a read of a response's body that ends the dispatch the response answered.

NeMo Gym's collector POSTs a rollout to ``/run``, gets the response back (the dispatch target
returns there), and reads its body (the rollout's result, with its token usage) afterwards, in
``get_response_json``. A dispatch whose schema says its result is such a response
(``body_read_later``) hands its open span here (:func:`hold`); the read of that response's body
ends it with the totals the body carries, and a read that raises (the connection reset while the
body streams in) ends it failed, with the exception's type. A response never read ends its
dispatch, without totals and at the time the POST returned, when the response is collected
(``weakref.finalize``) or at the process's exit, before the tracer provider shuts down
(``record.exit``), whichever comes first. No span of its own.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from gym_instrument import semconv
from gym_instrument.record.exit import before_exit
from gym_instrument.role.base import CallInFlight, Pending, Role, RoleCall

# Dispatches waiting for their response's body, by the response's id(): whoever pops an entry
# ends it (the read, the response's finalizer, the process's exit), so it ends once. A finalizer
# runs before its object's memory is freed, so an id is never reused while its entry waits.
_WAITING: dict[int, Pending] = {}
_EXIT_ARRANGED = [False]  # whether end_waiting runs before the provider shuts down


def _abandoned(key: int) -> None:
    pending = _WAITING.pop(key, None)
    if pending is not None:
        pending.finish()


def end_waiting() -> None:
    """End every dispatch still waiting for its body (the process ends: it will never be read)."""
    while _WAITING:
        try:
            _, pending = _WAITING.popitem()
        except KeyError:  # emptied meanwhile
            return
        pending.finish()


def hold(response: Any, pending: Pending) -> bool:
    """Let the read of ``response``'s body end ``pending``; False when it cannot be watched (ends now)."""
    key = id(response)
    try:
        finalizer = weakref.finalize(response, _abandoned, key)
    except TypeError:  # not weakly referenceable: nothing could end it later
        return False
    # Not at exit through weakref's own hook, which runs after any provider made after the process's
    # first finalizer has shut down: end_waiting ends it at exit, before its provider shuts down.
    finalizer.atexit = False
    if not _EXIT_ARRANGED[0]:
        _EXIT_ARRANGED[0] = True
        before_exit(end_waiting)  # registered now: after the provider that made this span
    _WAITING[key] = pending
    return True


def _forget_in_forked_child() -> None:
    # The parent's dispatches are the parent's to end: a forked child that ended its copies (at its
    # exit, or a SIGTERM from its pool) would export each dispatch span a second time.
    _WAITING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)


def waiting() -> int:
    """How many dispatches wait for their response's body."""
    return len(_WAITING)


class ReadResultRole(Role):
    """A function that reads a response's body (its first argument) and returns it parsed; the
    dispatch that waited for that body ends with it, or failed when the read raises."""

    name = semconv.ROLE_READ_RESULT
    row_names = ("response",)
    decorated = False

    def emit(self, call: RoleCall, flight: CallInFlight, result: Any) -> None:
        pending = _WAITING.pop(id(flight.row), None)
        if pending is not None:
            pending.finish(result)

    def on_failure(self, call: RoleCall, flight: CallInFlight, exception: BaseException) -> None:
        pending = _WAITING.pop(id(flight.row), None)
        if pending is not None:
            pending.finish(exception=exception)
