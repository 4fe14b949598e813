"""Failures of the package's own code, logged once each and never raised to the host.

A failure is known by *what* failed and *where* (a rule and the target it runs for, an extractor,
a metric): the same failure on every call is logged once; the same rule failing for another
target, or another framework's rule, is logged too. The log says where it failed and the
exception's type and frames, never its message: a message can quote the row it choked on
(pydantic's ValidationError does), and row content stays out of logs at every level.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback

from gym_instrument.record.attributes import utf8_safe

_LOG = logging.getLogger("gym_instrument")
_SEEN_MAX = 10_000  # distinct failures remembered; past that, the oldest half is forgotten


def error_type(exception: BaseException) -> str:
    kind = type(exception)
    module = getattr(kind, "__module__", None)
    return kind.__qualname__ if module in (None, "builtins") else f"{module}.{kind.__qualname__}"


class FailureLog:
    """Logs each distinct failure once, keyed by (what failed, where)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()

    def first(self, what: str, where: str) -> bool:
        """Whether (what, where) is new: True once, then False until :meth:`forget`."""
        key = (what, where)
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= _SEEN_MAX:
                for old in list(self._seen)[: _SEEN_MAX // 2]:
                    del self._seen[old]
            self._seen[key] = None
        return True

    def failed(self, what: str, where: str) -> None:
        """Log the exception being handled as ``what`` failing at ``where``, once per (what, where)."""
        if not self.first(what, where):
            return
        error = sys.exc_info()[1]
        kind = utf8_safe(error_type(error)) if error is not None else "an exception"
        frames = traceback.format_list(traceback.extract_tb(error.__traceback__)) if error is not None else []
        _LOG.warning(
            "gym_instrument: %s (%s) raised %s; it is skipped for this call\n%s",
            what,
            utf8_safe(where),
            kind,
            "".join(frames).rstrip(),
        )

    def forget(self) -> None:
        """Log every failure again (a new ``instrument()``)."""
        with self._lock:
            self._seen.clear()


FAILURES = FailureLog()


def name_of(culprit: object) -> str:
    """A callable's qualified name, for a failure's *where* (a hostile object's type name)."""
    try:
        name = getattr(culprit, "__qualname__", None)
        if isinstance(name, str):
            module = getattr(culprit, "__module__", None)
            return f"{module}.{name}" if isinstance(module, str) else name
    except Exception:
        pass
    return type(culprit).__qualname__
