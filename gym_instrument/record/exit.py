"""The process's end: spans still open are ended before the tracer provider shuts down.

The SDK's tracer provider shuts down in an ``atexit`` hook it registered when it was made, and
``atexit`` runs the last registered hook first. An action registered with :func:`before_exit`
(ending the dispatch spans that still wait for a response's body) runs in one hook of this module,
registered with the first such action, after the provider that made those spans: so before that
provider shuts down, whatever registered earlier (the exit hook of ``weakref.finalize``,
registered with the process's first finalizer, a ``tempfile`` one say, runs after every provider
made later).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

from gym_instrument.record.failures import FAILURES, name_of

_WHERE = "the process's end"  # where failure logs say it happened

_ACTIONS: list[Callable[[], None]] = []
_ACTIONS_LOCK = threading.RLock()
_AT_EXIT = [False]  # whether run_before_exit is registered with atexit


def before_exit(action: Callable[[], None]) -> None:
    """Run ``action`` before the tracer provider shuts down at the process's exit. Registering it
    again changes nothing."""
    with _ACTIONS_LOCK:
        if action not in _ACTIONS:
            _ACTIONS.append(action)
        if not _AT_EXIT[0]:
            _AT_EXIT[0] = True
            atexit.register(run_before_exit)


def run_before_exit() -> None:
    """Run every :func:`before_exit` action (each its own failure, logged once)."""
    with _ACTIONS_LOCK:
        actions = tuple(_ACTIONS)
    for action in actions:
        try:
            action()
        except Exception:
            FAILURES.failed(f"{name_of(action)}, run at", _WHERE)
