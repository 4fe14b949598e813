"""The training step, and the policy version, of the rollouts a dispatch runs.

A trainer says which of its steps (and, where it has one, which policy version) the rollouts it
launches belong to; every dispatch span of those rollouts carries it: ``nemo.gym.train.step``
(an int >= 0) and ``nemo.gym.policy.version`` (a string). Span attributes only, never a metric
attribute: a run has as many steps as it trains. Where they come from is declared once, by the
``train_step`` setting (``OTEL_PYTHON_GYM_TRAIN_STEP``):

- ``baggage`` (the default): the W3C baggage entries ``nemo.gym.train.step`` and
  ``nemo.gym.policy.version`` of the context the dispatch is called in: set by the trainer in
  this process, or in the process whose request the dispatch serves (baggage crosses processes
  with the trace context); else those of the process's ``BAGGAGE`` environment variable, read once
  when ``instrument()`` runs, as ``TRACEPARENT`` is;
- a fixed step (``"120"``), or a step and a policy version (``"120:ckpt-120"``): every dispatch of
  the process, whatever its context says;
- ``off``: none.

Everything but the context's baggage is decided when ``instrument()`` runs; per dispatch, the
baggage source costs one lookup in the context (and nothing more when it carries no step).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from opentelemetry import baggage, context
from opentelemetry.context import Context

from gym_instrument import compat, semconv
from gym_instrument.record.attributes import INT64_MAX, utf8_safe

_LOG = logging.getLogger("gym_instrument")

STEP_FROM_BAGGAGE = "baggage"
STEP_OFF = "off"
STEP_FIXED = "fixed"

_BAGGAGE_KEY = compat.CONTEXT_KEYS[1] if compat.CONTEXT_KEYS is not None else None
_NEVER_SET = context.create_key("gym_instrument.no_step_source")  # (off: no context holds it)


class StepSource(NamedTuple):
    """What the ``train_step`` setting declares: where a dispatch's step comes from."""

    mode: str = STEP_FROM_BAGGAGE  # STEP_FROM_BAGGAGE, STEP_OFF or STEP_FIXED
    step: int | None = None  # STEP_FIXED: the step
    policy_version: str | None = None  # STEP_FIXED: the policy version, when given


def whole_step(value: Any) -> int | None:
    """A step: an int >= 0 within int64 (not a bool), or a string of one; else None."""
    if type(value) is int:
        step = value
    elif isinstance(value, str) and len(value) <= 40 and value.strip().isascii() and value.strip().isdigit():
        step = int(value.strip())  # (at most 40 characters: int() refuses thousands of digits, raising)
    else:
        return None
    return step if 0 <= step <= INT64_MAX else None


def _attributes(step: int | None, policy_version: str | None) -> dict[str, Any] | None:
    attributes: dict[str, Any] = {}
    if step is not None:
        attributes[semconv.TRAIN_STEP] = step
    if policy_version:
        attributes[semconv.POLICY_VERSION] = utf8_safe(policy_version)
    return attributes or None


class TrainSteps:
    """The step attributes a dispatch gets (:meth:`of`), from the source :meth:`configure` declared."""

    __slots__ = ("_last", "_lock", "_warned", "fixed", "from_baggage", "idle_without")

    def __init__(self) -> None:
        self.from_baggage = True
        # The context key a dispatch's context must hold something under for :meth:`of` to find a
        # step (its baggage), when nothing else can give one; None: ask :meth:`of` every time.
        self.idle_without: Any = _BAGGAGE_KEY
        self.fixed: dict[str, Any] | None = None  # a fixed source's, or the environment's BAGGAGE's
        # The last baggage values read and their attributes: a step's dispatches all carry the same ones.
        self._last: tuple[Any, Any, dict[str, Any] | None] = (None, None, None)
        self._warned = False
        self._lock = threading.Lock()

    def configure(self, source: StepSource, environment_baggage: Mapping[str, object] | None = None) -> None:
        """Read steps from ``source`` from now on; ``environment_baggage``: the process's ``BAGGAGE``
        entries, what a dispatch whose context names no step gets under the baggage source."""
        self.from_baggage = source.mode == STEP_FROM_BAGGAGE
        if source.mode == STEP_FIXED:
            self.fixed = _attributes(source.step, source.policy_version)
        elif self.from_baggage and environment_baggage:
            step = environment_baggage.get(semconv.BAGGAGE_TRAIN_STEP)
            version = environment_baggage.get(semconv.BAGGAGE_POLICY_VERSION)
            self.fixed = self._read(step, version, "BAGGAGE") if step is not None or version is not None else None
        else:
            self.fixed = None
        self._last = (None, None, None)
        self._warned = False
        if self.fixed is not None:
            self.idle_without = None
        else:
            self.idle_without = _BAGGAGE_KEY if self.from_baggage else _NEVER_SET

    def of(self, current: Context) -> dict[str, Any] | None:
        """The step attributes of a dispatch called in ``current`` (None: no step); not to be changed."""
        if self.from_baggage:
            entries: Mapping[str, object] | None = (
                current.get(_BAGGAGE_KEY) if _BAGGAGE_KEY is not None else baggage.get_all(current)  # type: ignore[assignment]
            )
            if entries:
                step = entries.get(semconv.BAGGAGE_TRAIN_STEP)
                version = entries.get(semconv.BAGGAGE_POLICY_VERSION)
                if step is not None or version is not None:
                    last = self._last
                    if last[0] == step and last[1] == version:
                        return last[2]
                    attributes = self._read(step, version, "baggage")
                    self._last = (step, version, attributes)
                    return attributes
        return self.fixed

    def _read(self, step: object, version: object, where: str) -> dict[str, Any] | None:
        whole = whole_step(step) if step is not None else None
        if step is not None and whole is None:
            with self._lock:
                warn, self._warned = not self._warned, True
            if warn:  # once: every dispatch of a step would say it again
                _LOG.warning(
                    "gym_instrument: %s entry %s=%r is not a whole number >= 0: the dispatches it reaches get no step",
                    where,
                    semconv.BAGGAGE_TRAIN_STEP,
                    str(step)[:64],
                )
        return _attributes(whole, version if isinstance(version, str) else None)


TRAIN_STEPS = TrainSteps()
