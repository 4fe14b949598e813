"""The bounded metrics: counted per call in tallies (one C-level call each) that observable
counters read when the meter provider collects. Only bounded attributes, ever: never a task id,
rollout id, reward value or free text."""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from gym_instrument import semconv
from gym_instrument.record.failures import FAILURES
from gym_instrument.version import __version__

SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"


class Tally:
    """One metric point's running count, read by its observable counter's callback.

    A call adds one with ``next(tally.ticks)``: a single C-level call on an ``itertools.count``,
    atomic under the GIL, with no lock and nothing looked up (0.04 us, ``make bench``'s ``parts``).
    A synchronous ``Counter.add`` costs 4.6 us there under an SDK meter provider (measurement,
    attribute set, aggregation lock), which a zero-code run has. Larger amounts (a health pass's verdicts,
    evictions) go through :meth:`add`. Each read takes one tick itself, which :meth:`value` subtracts.
    """

    __slots__ = ("_extra", "_lock", "_reads", "attributes", "ticks")

    def __init__(self, attributes: Mapping[str, str] | None) -> None:
        self.attributes = attributes
        self._lock = threading.Lock()
        self.ticks = itertools.count()
        self._reads = 0
        self._extra = 0

    def restart(self) -> None:
        """Count from zero again (in a forked child), with a fresh lock."""
        self._lock = threading.Lock()
        self._reads = next(self.ticks) + 1  # so that the next read, which takes a tick itself, is 0
        self._extra = 0

    def add(self, amount: int) -> None:
        with self._lock:
            self._extra += amount

    def value(self) -> int:
        with self._lock:
            value = next(self.ticks) - self._reads + self._extra
            self._reads += 1
        return value


class RewardedRollouts:
    """The rollouts ``gym.rollout.rewarded_total`` has counted in this process, in at most
    :attr:`MAX_BYTES` of memory whatever the ids' lengths: a multi-step rollout scores every step,
    and is counted at its first rewarded verify only.

    Each rollout is remembered by a fixed-size digest of its id (``hash()``, 64 bits: a rollout
    taken for another among the remembered ones is a chance of about one in 10^14 per rollout),
    so a 2 KiB id costs what a short one does (:attr:`ENTRY_BYTES`). Eviction is by last use: a
    rollout scored again moves to the newest end, so one still scoring stays while fewer than
    :attr:`capacity` other rollouts are rewarded between two of its steps.

    A rollout evicted and scored again, or scored in another process too, is counted again there.
    """

    MAX_BYTES = 8 << 20
    # What one remembered rollout costs: its digest (an int) and its ordered-dict entry, the table's
    # slack and its regrowth included (tracemalloc, CPython 3.11, 64-bit: 155 to 210 bytes held,
    # up to 310 at the peak of a table's regrowth; tests/test_record.py checks the bound).
    ENTRY_BYTES = 320

    __slots__ = ("_ids", "_lock", "capacity", "max_bytes")

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.capacity = max(1, max_bytes // self.ENTRY_BYTES)
        self._ids: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, rollout_id: str) -> bool:
        """Whether ``rollout_id`` is rewarded for the first time (it is remembered from now on)."""
        digest = hash(rollout_id)  # (a str caches its hash: nothing is computed twice)
        with self._lock:
            ids = self._ids
            if digest in ids:
                ids.move_to_end(digest)
                return False
            ids[digest] = None
            if len(ids) > self.capacity:
                ids.popitem(last=False)
            return True

    def restart(self) -> None:
        """Nothing counted yet, with a fresh lock (in a forked child)."""
        self._ids = OrderedDict()
        self._lock = threading.Lock()


_METRICS: dict[str, tuple[str, str, tuple[Mapping[str, str] | None, ...]]] = {
    # name: (unit, description, the attribute sets it is counted under)
    semconv.METRIC_REWARDED: ("{rollout}", "Rollouts a verify put a numeric, unmasked reward on", (None,)),
    semconv.METRIC_DISPATCHES: (
        "{rollout}",
        "Rollout dispatches by outcome (ok, error, cancelled)",
        tuple({semconv.OUTCOME: outcome} for outcome in (semconv.OUTCOME_OK, semconv.OUTCOME_ERROR, semconv.OUTCOME_CANCELLED)),
    ),
    semconv.METRIC_VERDICTS: (
        "{rollout}",
        "Health verdicts of traced rollouts by verdict",
        tuple({"verdict": verdict} for verdict in (*sorted(semconv.KNOWN_VERDICTS), semconv.VERDICT_OTHER)),
    ),
    semconv.METRIC_LINK_EVICTIONS: (
        "{span}",
        "Remembered dispatch spans evicted at capacity before their health verdict",
        (None,),
    ),
}


class Tallies:
    """Every metric point of one meter provider, each a :class:`Tally`, by metric and attributes
    (shared by the recorders of that provider, :func:`tallies_for`).

    The per-call ones are attributes too, so that the engine adds one with one ``next()``:
    ``ok``, ``error`` and ``cancelled`` (dispatches by outcome) and ``rewarded`` (rollouts, once each:
    ``rewarded_rollouts``).
    """

    def __init__(self) -> None:
        self.points: dict[str, dict[tuple[tuple[str, str], ...], Tally]] = {
            metric: {_point_key(attributes): Tally(attributes) for attributes in attribute_sets}
            for metric, (_, _, attribute_sets) in _METRICS.items()
        }
        dispatches = self.points[semconv.METRIC_DISPATCHES]
        self.ok = dispatches[((semconv.OUTCOME, semconv.OUTCOME_OK),)].ticks
        self.error = dispatches[((semconv.OUTCOME, semconv.OUTCOME_ERROR),)].ticks
        self.cancelled = dispatches[((semconv.OUTCOME, semconv.OUTCOME_CANCELLED),)].ticks
        self.rewarded = self.points[semconv.METRIC_REWARDED][()].ticks
        self.rewarded_rollouts = RewardedRollouts()

    def of(self, metric: str, attributes: Mapping[str, str] | None) -> Tally:
        return self.points[metric][_point_key(attributes)]  # (a set no metric declares: KeyError, logged by count)


def _point_key(attributes: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(attributes.items())) if attributes else ()


# The tallies of each meter provider recorders record to (weakly: a provider that is gone counts
# nothing), and of the global one, whenever it is set: one set each, shared by every recorder of
# that provider, so that instrument() after uninstrument() goes on counting where the last one
# stopped (the counters are cumulative). An SDK meter keeps the first observable instrument of a
# name and ignores the callbacks of a later registration (the API's proxy instrument, made when
# the global provider is set, may come second), so every callback reports the same thing
# whoever registered it: the sums over every set of tallies that records to the provider it is
# called for.
_BY_PROVIDER: weakref.WeakKeyDictionary[metrics.MeterProvider, Tallies] = weakref.WeakKeyDictionary()
_GLOBAL: list[Tallies] = []  # the global provider's, once made
_REGISTRY_LOCK = threading.Lock()


def _each_tallies() -> list[tuple[metrics.MeterProvider | None, Tallies]]:
    with _REGISTRY_LOCK:
        return [*_BY_PROVIDER.items(), *((None, tallies) for tallies in _GLOBAL)]


def _observe(
    metric: str, provider: weakref.ref[metrics.MeterProvider] | None
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        target = metrics.get_meter_provider() if provider is None else provider()
        if target is None:
            return []
        sums: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        for owner, tallies in _each_tallies():
            if (metrics.get_meter_provider() if owner is None else owner) is not target:
                continue
            for key, tally in tallies.points[metric].items():
                value = tally.value()
                if value:
                    point = sums.setdefault(key, [0, tally.attributes])
                    point[0] += value
        return [Observation(value, attributes) for value, attributes in sums.values()]

    return callback


def tallies_for(meter_provider: metrics.MeterProvider | None) -> Tallies:
    """The tallies of recorders of ``meter_provider`` (None: the global one), counted into its
    observable counters. A provider they cannot be registered with (one that cannot be weakly
    referenced, or whose meter raises) gets tallies of its own that nothing reads, logged once."""
    try:
        with _REGISTRY_LOCK:
            known = _BY_PROVIDER.get(meter_provider) if meter_provider is not None else (_GLOBAL[0] if _GLOBAL else None)
            if known is not None:
                return known
            tallies = Tallies()
            owner = None if meter_provider is None else weakref.ref(meter_provider)
            if meter_provider is None:
                _GLOBAL.append(tallies)
            else:
                _BY_PROVIDER[meter_provider] = tallies
        # With no SDK yet, the API's proxy instruments start observing once a meter provider is set.
        provider = meter_provider or metrics.get_meter_provider()
        meter = metrics.get_meter(semconv.INSTRUMENTATION_NAME, __version__, provider, schema_url=SCHEMA_URL)
        for metric, (unit, description, _) in _METRICS.items():
            meter.create_observable_counter(metric, [_observe(metric, owner)], unit=unit, description=description)
        return tallies
    except Exception:
        FAILURES.failed("making the metric instruments of", "a meter provider")
        return Tallies()


def _forget_in_forked_child() -> None:
    """A forked child's counts start from zero: the parent's are the parent's to report (and a lock
    another thread held at the fork is never released in the child)."""
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for _, tallies in _each_tallies():
        tallies.rewarded_rollouts.restart()
        for points in tallies.points.values():
            for tally in points.values():
                tally.restart()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)
