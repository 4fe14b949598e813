"""The process's end: spans still open are ended, and what is queued is exported, before it goes.

Two ways a process ends would lose spans the SDK alone keeps:

- **Interpreter exit.** The SDK's tracer provider shuts down in an ``atexit`` hook it registered when
  it was made, and ``atexit`` runs the last registered hook first. An action registered with
  :func:`before_exit` (ending the dispatch spans that still wait for a response's body) runs in one
  hook of this module, registered with the first such action, after the provider that made those
  spans: so before that provider shuts down, whatever registered earlier (the exit hook of
  ``weakref.finalize``, registered with the process's first finalizer, a ``tempfile`` one say, runs
  after every provider made later).
- **A termination signal that kills the process** (``SIGTERM`` with its default disposition: how
  Slurm and Kubernetes stop a job). The process dies without running ``atexit``, so the spans a
  ``BatchSpanProcessor`` still holds (up to its schedule delay, 5 s by default) are lost. uvicorn
  catches SIGTERM and SIGINT for its graceful shutdown, then puts back the handler it found and
  raises the signal again. :func:`flush_on_signals` installs, from the main thread, a handler that
  force-flushes the global tracer and meter providers (and those ``instrument()`` was given), then
  lets the signal do what it did before: a handler the application had set is called; the
  default disposition is put back and the signal raised again, after the :func:`before_exit`
  actions ran (the process is about to die). It is installed only over the default disposition
  or a handler the application set, never over an ignored signal nor over Python's own SIGINT
  handler (which raises ``KeyboardInterrupt``, so the process exits through ``atexit`` anyway,
  and asyncio recognises it to cancel its main task on Ctrl-C). A handler set later replaces it,
  as it would any other; one that puts back the handler it found (uvicorn) puts back this one.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from opentelemetry import metrics, trace

from gym_instrument.record.failures import FAILURES, name_of

# How long a signal waits for the flush (it runs in a thread of its own, so a lock the interrupted
# main thread holds can only delay the signal, never stop it).
FLUSH_TIMEOUT_SECONDS = 10.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_WHERE = "the process's end"  # where failure logs say it happened

_ACTIONS: list[Callable[[], None]] = []
_ACTIONS_LOCK = threading.RLock()  # (a signal handler may run while the main thread holds it)
_AT_EXIT = [False]  # whether run_before_exit is registered with atexit


def before_exit(action: Callable[[], None]) -> None:
    """Run ``action`` before the tracer provider shuts down at the process's exit (and before the
    flush of a signal that kills it). Registering it again changes nothing."""
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


def flush(providers: tuple[Any, ...] = (), timeout: float = FLUSH_TIMEOUT_SECONDS) -> None:
    """Force-flush the global tracer and meter providers and ``providers`` (each once; one without
    ``force_flush``, as the API's own, is skipped), waiting at most ``timeout`` seconds."""

    def flush_each() -> None:
        seen: list[Any] = []
        for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), *providers):
            force_flush = getattr(provider, "force_flush", None)
            if provider is None or any(provider is other for other in seen) or not callable(force_flush):
                continue
            seen.append(provider)
            try:
                force_flush()
            except Exception:
                FAILURES.failed(f"flushing {type(provider).__qualname__} at", _WHERE)

    try:
        worker = threading.Thread(target=flush_each, name="gym_instrument flush", daemon=True)
        worker.start()
        worker.join(timeout)
    except Exception:  # no new thread (the interpreter is finishing): nothing more can be sent
        FAILURES.failed("flushing the providers at", _WHERE)


class _SignalFlush:
    """The handler :func:`flush_on_signals` installs, and what it found before it (to chain to)."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}  # the handler found when it was installed, by signal
        self.providers: tuple[Any, ...] = ()
        self.armed = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        previous = self.previous.get(signum, signal.SIG_DFL)
        if self.armed:
            try:
                if previous == signal.SIG_DFL:
                    run_before_exit()  # the process dies with the signal: no atexit after this
                flush(self.providers)
            except Exception:
                FAILURES.failed("flushing on a signal at", _WHERE)
        if previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)  # what it did before: end the process, by this signal
        elif callable(previous):
            previous(signum, frame)  # the application's own handler, as if this one were not there


_HANDLER = _SignalFlush()


def flush_on_signals(providers: tuple[Any, ...] = ()) -> bool:
    """Install the flushing handler for SIGTERM and SIGINT (see the module); False when it could
    not be installed from here (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    _HANDLER.providers = tuple(provider for provider in providers if provider is not None)
    _HANDLER.armed = True
    for signum in _SIGNALS:
        try:
            current = signal.getsignal(signum)
            if current is _HANDLER or current is None or current == signal.SIG_IGN:
                continue  # installed already; set outside Python; ignored (nothing to chain to)
            if signum == signal.SIGINT and current is signal.default_int_handler:
                continue  # Python's own: KeyboardInterrupt, then atexit
            _HANDLER.previous[signum] = current
            signal.signal(signum, _HANDLER)
        except Exception:
            FAILURES.failed("installing the flush on signals at", _WHERE)
    return True


def stop_flushing_on_signals() -> None:
    """Put back what :func:`flush_on_signals` found where its handler is still installed; where a
    handler set later keeps a reference to it (to chain to), it only chains from now on."""
    _HANDLER.armed = False
    _HANDLER.providers = ()
    if threading.current_thread() is not threading.main_thread():
        return
    found = _HANDLER.previous
    for signum, previous in list(found.items()):
        try:
            if signal.getsignal(signum) is _HANDLER:
                signal.signal(signum, previous)
                del found[signum]
        except Exception:
            FAILURES.failed("removing the flush on signals at", _WHERE)
