"""The bounded memory that lets a health verdict find its (already ended) dispatch span.

A dispatch that ends is appended, its span context and its rollout identity, to a pending list:
one ``list.extend`` of two references, no lock, nothing computed. Every ``BATCH`` of them (or
sooner, at capacity or when something reads) are moved into a batch with C-level maps (one
25-byte record each of trace id, span id and trace flags, read back with one ``unpack_from``;
task and rollout indices in arrays, or the keys themselves for the unusual ones), and the span
contexts and identities are let go: about 40 bytes per dispatch held, whatever the run's length. A batch is
appended to until it holds ``BATCH`` dispatches.

The lookup index (key -> sequence number) is built only when something reads the memory (a
verdict's lookup, its size) or when it is full, from the columns at C speed for the usual keys,
and dropped when every dispatch in it has been found. Remembering stays an append on the
dispatch's path; the index costs a health pass about 0.2 us per dispatch, and about 115 bytes per
dispatch until its verdict finds it.

Keys: a small int for the usual ``(task index, rollout index)`` identity; a tuple for a dispatch
with an attempt or a custom rollout id (found by its indices too, when it has them). With
``by_task`` (a target names rollouts by task id and repeat: a verdict record, a verify after its
dispatch), a dispatch with a task id is also found by ``(task id, repeat)``, its latest attempt
(or the attempt named). A later dispatch of the same key replaces an earlier one, and a verdict
finds a dispatch at most once.

Capacity bounds the dispatches held: the last ``capacity`` dispatches that ended are remembered,
and the oldest is let go when one more ends (an eviction when nothing had found or replaced it
yet; counted and logged once).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import weakref
from array import array
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import attrgetter, lshift, or_, xor
from typing import Any, NamedTuple

from opentelemetry.trace import SpanContext

from gym_instrument.compat import span_context, span_id_of, trace_flags_of, trace_id_of
from gym_instrument.link.identity import RolloutIdentity, index_form, parse_index_form

_LOG = logging.getLogger(__name__)

_ATTEMPT_MAX = (1 << 16) - 1  # larger attempts are stored as this and match by indices only

_ROLLOUT_SHIFT = 40
_SMALL_TASK, _SMALL_ROLLOUT = 1 << _ROLLOUT_SHIFT, 1 << 16

# One dispatch's span context in a batch: its trace id (16 bytes), span id and trace flags, side by
# side, so that a lookup reads one place of memory, not three.
_RECORD = struct.Struct(">16sQB")
_READ, _RECORD_SIZE = _RECORD.unpack_from, _RECORD.size
_FROM_BYTES = int.from_bytes

_BATCH_BITS = 9
_OFFSET_MASK = (1 << _BATCH_BITS) - 1


def _index_key(task_index: int, rollout_index: int) -> int:
    # Small ints for the usual sizes (cheaper objects); a second, negative range keeps it injective.
    # A dict finds an int key's slot from its low bits: both indices reach them (task ^ rollout),
    # so consecutive tasks and the repeats of one task land in different slots. With the rollout
    # index only in the low bits (task << 16 | rollout), a run's keys shared a handful of slots
    # and every insert walked a long probe chain (remembering a dispatch cost 2-3x more).
    if rollout_index < _SMALL_ROLLOUT and task_index < _SMALL_TASK:
        return (rollout_index << _ROLLOUT_SHIFT) | (task_index ^ rollout_index)  # (see _Batch.primaries)
    return -(((task_index << 64) | rollout_index) + 1)


class _Keyed(NamedTuple):
    """The key of a dispatch with an attempt, a custom rollout id or a task id (``by_task``)."""

    custom_id: str | None
    task_index: int | None
    rollout_index: int | None
    attempt: int
    task_id: str | None = None  # (kept with by_task only)


_Key = int | _Keyed
_TaskKey = tuple[str, int]  # (task id, repeat)


def _primary(key: _Key) -> int | str | _TaskKey:
    """The index key a dispatch is found under: its indices when it has them, else its custom id,
    else its task id and repeat."""
    if type(key) is int:
        return key
    custom_id, task_index, rollout_index, _, task_id = key  # type: ignore[misc]
    if task_index is not None and rollout_index is not None:
        return _index_key(task_index, rollout_index)
    if custom_id is not None:
        return custom_id
    return (task_id, rollout_index)  # type: ignore[return-value]


def _task_key(key: _Key) -> _TaskKey | None:
    if not isinstance(key, _Keyed) or key.task_id is None or key.rollout_index is None:
        return None
    return (key.task_id, key.rollout_index)


def _rollout_id_of(key: _Key) -> str | None:
    """The rollout id a dispatch is named by: its custom id, else the index form of its indices (None: neither)."""
    if type(key) is int:
        return None  # (named by the verdict's own indices)
    custom_id, task_index, rollout_index, attempt, _ = key  # type: ignore[misc]
    if custom_id is not None:
        return custom_id
    if task_index is not None and rollout_index is not None:
        return index_form(task_index, rollout_index, attempt)
    return None


def _named(contexts: list[SpanContext], identities: list[RolloutIdentity], by_task: bool) -> tuple[list[SpanContext], list[_Key]]:
    """The span contexts and keys of ended dispatches, those no verdict could name left out."""
    named, keys = [], []
    for context, identity in zip(contexts, identities, strict=True):
        task_index, rollout_index, attempt = identity.task_index, identity.rollout_index, identity.attempt
        custom_id = identity.rollout_id if identity.custom_id else None
        task_id = identity.task_id if by_task and rollout_index is not None and type(identity.task_id) is str else None
        key: _Key
        if custom_id is None and task_id is None and (task_index is None or rollout_index is None):
            continue  # nothing a verdict could name it by
        if custom_id is not None or attempt or task_id is not None:
            key = _Keyed(custom_id, task_index, rollout_index, min(attempt or 0, _ATTEMPT_MAX), task_id)
        else:
            try:
                key = _index_key(task_index, rollout_index)  # type: ignore[arg-type]
            except TypeError:
                _LOG.debug("gym_instrument: a dispatch with indices %r, %r is not remembered", task_index, rollout_index)
                continue
        named.append(context)
        keys.append(key)
    return named, keys


_TASK_INDEX, _ROLLOUT_INDEX = attrgetter("task_index"), attrgetter("rollout_index")
_ATTEMPT, _CUSTOM, _TASK_ID = attrgetter("attempt"), attrgetter("custom_id"), attrgetter("task_id")


def _attempt(key: _Key) -> int:
    return 0 if type(key) is int else key.attempt  # type: ignore[union-attr]


# A remembered dispatch: its span context and rollout id (None: a dispatch named by its task id and
# repeat alone had none). A plain pair: a lookup makes one per dispatch found.
DispatchLink = tuple[SpanContext, "str | None"]


class _Batch:
    """Up to ``BATCH`` dispatches, their span contexts as records, appended to until it is full;
    entries below ``start`` have been let go.

    A *plain* batch (every dispatch named by small indices alone, the usual run) keeps its task and
    rollout indices in arrays and makes their keys when it is indexed; any other keeps its keys."""

    __slots__ = ("keys", "plain", "records", "rollouts", "size", "start", "tasks")

    def __init__(self) -> None:
        self.plain = True
        self.tasks, self.rollouts = array("Q"), array("H")
        self.keys: list[_Key] = []
        self.records = bytearray()  # _RECORD each
        self.start = 0
        self.size = 0

    def add(self, contexts: list[SpanContext], identities: list[RolloutIdentity], by_task: bool) -> int:
        """Append ended dispatches (those no verdict could name left out); how many were kept.
        ``by_task``: a dispatch with a task id is found by it too (not plain)."""
        plain = False
        if (
            self.plain
            and not any(map(_ATTEMPT, identities))
            and not any(map(_CUSTOM, identities))
            and not (by_task and any(map(_TASK_ID, identities)))
        ):
            try:  # (None, a negative or a large index: not plain)
                tasks, rollouts = array("Q", map(_TASK_INDEX, identities)), array("H", map(_ROLLOUT_INDEX, identities))
                plain = max(tasks) < _SMALL_TASK
            except (TypeError, OverflowError):
                pass
        if plain:
            self.tasks += tasks
            self.rollouts += rollouts
        else:
            if self.plain:  # from now on its keys are kept
                self.keys = list(self.primaries(0))
                self.plain = False
                self.tasks, self.rollouts = array("Q"), array("H")
            contexts, keys = _named(contexts, identities, by_task)
            self.keys += keys
        trace_ids = map(int.to_bytes, map(trace_id_of, contexts), repeat(16), repeat("big"))  # type: ignore[arg-type]
        self.records += b"".join(map(_RECORD.pack, trace_ids, map(span_id_of, contexts), map(trace_flags_of, contexts)))
        self.size += len(contexts)
        return len(contexts)

    def primaries(self, first: int) -> Any:
        """The index keys of the entries from ``first`` on, in order."""
        if self.plain:  # (_index_key's small-index key, at C speed: a plain batch's indices are small)
            tasks, rollouts = self.tasks[first:], self.rollouts[first:]
            return map(or_, map(lshift, rollouts, repeat(_ROLLOUT_SHIFT)), map(xor, tasks, rollouts))
        return map(_primary, self.keys[first:])

    def attempt(self, offset: int) -> int:
        """The attempt of one entry (0 in a plain batch)."""
        return 0 if self.plain else _attempt(self.keys[offset])

    def link(self, offset: int, rollout_id: str | None) -> DispatchLink:
        """One entry's link, named ``rollout_id``."""
        trace_id, span_id, flags = _READ(self.records, offset * _RECORD_SIZE)
        return (span_context(_FROM_BYTES(trace_id, "big"), span_id, flags & 1), rollout_id)


# What names a rollout a verdict or a verify looks up: (rollout id, task index, repeat), or with a
# task id and an attempt after them; any may be None.
RolloutName = tuple[Any, ...]


class DispatchLinks:
    """Dispatch span contexts by rollout identity, bounded by ``capacity``, oldest let go first.

    Thread-safe: remembering is one atomic append; sealing, indexing and lookups take one lock
    (no awaits inside), so asyncio tasks, threads and the worker thread a health pass runs in can
    share it; a lookup of one name that keeps what it finds (:meth:`find`) reads without it once
    everything is indexed. ``on_evicted(count)`` is told of evictions.
    """

    BATCH = 1 << _BATCH_BITS  # dispatches in a batch, and pending ones moved into the batches at once

    def __init__(self, capacity: int, on_evicted: Callable[[int], None] | None = None, by_task: bool = False) -> None:
        if capacity < 1:
            raise ValueError(f"link capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.by_task = by_task  # dispatches are found by (task id, repeat) too (see the module)
        self.on_evicted = on_evicted
        self._empty()
        _ALL_LINKS.add(self)

    def _empty(self) -> None:
        """Nothing remembered, nothing evicted yet, and a lock nobody holds."""
        self._evictions = 0
        self._warned = False
        self._pending: list[Any] = []  # span context, identity, span context, identity, ...
        self._batches: dict[int, _Batch] = {}  # by batch number; a sequence number is number << _BATCH_BITS | offset
        self._oldest = 0  # number of the oldest batch held
        self._next = 0  # number the next sealed batch gets
        self._index_next = 0  # dispatches of lower sequence numbers are in the index
        self._sealed_next = 0  # the sequence number the next dispatch sealed gets
        self._held = 0  # dispatches held in the batches
        self._seal_at = self._pending_length_that_seals()
        self._index: dict[Any, int] = {}  # primary key -> sequence number, of every dispatch not yet found or replaced
        # For dispatches with both indices and a custom id (the index key is then primary):
        self._custom_of_index: dict[int, str] = {}
        self._index_of_custom: dict[str, int] = {}
        # For dispatches with a task id (by_task): (task id, repeat) -> (primary key, rollout id), and back.
        self._primary_of_task: dict[_TaskKey, tuple[Any, str | None]] = {}
        self._task_of_primary: dict[Any, _TaskKey] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Dispatches remembered that no verdict has found and no later attempt has replaced."""
        with self._lock:
            evicted = self._index_everything()
            size = len(self._index)
        self._report(evicted)
        return size

    @property
    def evictions(self) -> int:
        """Dispatches let go at capacity before anything found or replaced them, so far."""
        with self._lock:
            evicted = self._seal()
            evictions = self._evictions
        self._report(evicted)
        return evictions

    def remember(self, span_context: SpanContext, identity: RolloutIdentity) -> None:
        """Remember an ended dispatch; a later attempt of the same indices replaces the earlier one.

        One atomic append of both references; the identity's indices, attempt and custom id are read
        when the dispatch is sealed (a rollout's identity is not changed once its dispatch has ended)."""
        pending = self._pending
        pending.extend((span_context, identity))
        if len(pending) >= self._seal_at:
            with self._lock:
                evicted = self._seal()
            self._report(evicted)

    # -- under the lock ----------------------------------------------------------------------

    def _seal(self) -> int:
        """Move the pending dispatches into the batches, letting the oldest go past capacity; how many were evicted."""
        pending = self._pending
        count = len(pending) & ~1
        if not count:
            return 0
        entries = pending[:count]
        del pending[:count]  # (appends made meanwhile are past these: each is one atomic extend)
        contexts, identities = entries[0::2], entries[1::2]
        full = self.BATCH
        while contexts:
            tail = self._batches.get(self._next - 1)
            if tail is None or tail.size >= full:
                tail = self._batches[self._next] = _Batch()
                self._next += 1
            room = full - tail.size
            self._held += tail.add(contexts[:room], identities[:room], self.by_task)
            self._sealed_next = ((self._next - 1) << _BATCH_BITS) + tail.size
            contexts, identities = contexts[room:], identities[room:]
        evicted = 0
        if self._held > self.capacity:
            evicted = self._let_go(self._held - self.capacity)
        self._seal_at = self._pending_length_that_seals()
        return evicted

    def _pending_length_that_seals(self) -> int:
        """A batch's worth of pending dispatches, or one more than capacity leaves room for (so that an
        eviction and its warning are not late); two list items each."""
        return 2 * min(self.BATCH, self.capacity - self._held + 1)

    def _index_everything(self) -> int:
        """Move what is pending into the batches and index every dispatch; how many were evicted."""
        evicted = self._seal()
        self._index_batches()
        return evicted

    def _index_batches(self) -> None:
        """Index the dispatches in the batches not yet indexed, in the order they ended."""
        index, full = self._index, self.BATCH
        while (number := self._index_next >> _BATCH_BITS) < self._next:
            base = number << _BATCH_BITS
            batch = self._batches.get(number)
            if batch is None:  # let go whole
                self._index_next = base + full
                continue
            first = max(batch.start, self._index_next - base)
            if first < batch.size:
                if batch.plain and not self._custom_of_index and not self._task_of_primary:
                    index.update(zip(batch.primaries(first), range(base + first, base + batch.size), strict=True))  # at C speed
                else:
                    keys = batch.primaries(first) if batch.plain else batch.keys[first:]
                    for sequence, key in zip(range(base + first, base + batch.size), keys, strict=True):
                        self._index_one(key, sequence)
            if batch.size < full:  # the batch still appended to
                self._index_next = base + batch.size
                return
            self._index_next = base + full

    def _index_one(self, key: _Key, sequence: int) -> None:
        index = self._index
        primary = _primary(key)
        custom_id = None if type(key) is int else key.custom_id  # type: ignore[union-attr]
        task = _task_key(key)
        # A later dispatch of the same indices, custom id or task and repeat replaces the earlier one.
        if custom_id is not None and (custom_id in self._index_of_custom or custom_id in index):
            self._discard_custom(custom_id)
        if task is not None and task in self._primary_of_task:
            self._discard_primary(self._primary_of_task[task][0])
        if primary in index:
            self._discard_primary(primary)
        if task is not None:
            self._primary_of_task[task] = (primary, _rollout_id_of(key))
            self._task_of_primary[primary] = task
        if custom_id is not None and primary != custom_id:
            self._custom_of_index[primary] = custom_id  # type: ignore[index]
            self._index_of_custom[custom_id] = primary  # type: ignore[assignment]
        index[primary] = sequence

    def _let_go(self, count: int) -> int:
        """Let the ``count`` oldest dispatches held go; those still findable are evictions."""
        self._index_batches()
        index, evicted = self._index, 0
        while count > 0:
            number = self._oldest
            batch = self._batches[number]
            base, stop = number << _BATCH_BITS, min(batch.size, batch.start + count)
            for sequence, primary in zip(range(base + batch.start, base + stop), batch.primaries(batch.start), strict=False):
                if index.get(primary) == sequence:
                    self._discard_primary(primary)
                    evicted += 1
            count -= stop - batch.start
            self._held -= stop - batch.start
            batch.start = stop
            if stop == batch.size:
                del self._batches[number]
                self._oldest += 1
        self._evictions += evicted
        return evicted

    def _discard_primary(self, key: Any) -> None:
        del self._index[key]
        if type(key) is int and self._custom_of_index:
            custom_id = self._custom_of_index.pop(key, None)
            if custom_id is not None:
                del self._index_of_custom[custom_id]
        if self._task_of_primary:
            task = self._task_of_primary.pop(key, None)
            if task is not None:
                del self._primary_of_task[task]

    def _discard_custom(self, custom_id: str) -> None:
        """Forget a dispatch found by its custom id, whether the id or its indices are its primary key."""
        index_key = self._index_of_custom.get(custom_id)
        self._discard_primary(custom_id if index_key is None else index_key)

    # -- lookups -----------------------------------------------------------------------------

    def _report(self, evicted: int) -> None:
        if not evicted:
            return
        if not self._warned:
            self._warned = True
            _LOG.warning(
                "gym_instrument: %d remembered dispatch spans reached the link capacity; the oldest are "
                "evicted and their health verdicts will find no dispatch span (raise "
                "OTEL_PYTHON_GYM_LINK_CAPACITY or link_capacity to keep more)",
                self.capacity,
            )
        if self.on_evicted is not None:
            try:
                self.on_evicted(evicted)
            except Exception:
                _LOG.debug("gym_instrument: counting evictions failed", exc_info=True)

    def take(self, rollout_id: str | None, task_index: int | None, rollout_index: int | None) -> DispatchLink | None:
        """Find and forget the dispatch a verdict names (each dispatch is found at most once)."""
        return self.take_many(((rollout_id, task_index, rollout_index),))[0]

    def take_many(self, verdicts: Sequence[RolloutName]) -> list[DispatchLink | None]:
        """:meth:`take` for each ``(rollout_id, task_index, rollout_index[, task_id, attempt])``, in
        order, under one lock.

        A verdict with an explicit rollout id (not the index form) finds the dispatch of that id
        (:meth:`_find_custom`); one with indices (or an index-form id) finds the latest attempt of
        them, or only the attempt an attempt-qualified id names; one with neither, but a task id and
        a repeat, finds the latest attempt of those (or the attempt it names), with ``by_task``.
        """
        return self._lookup(verdicts, True)

    def find_many(self, names: Sequence[RolloutName]) -> list[DispatchLink | None]:
        """The dispatch each name names, as :meth:`take_many` finds it, but kept: a rollout scored by
        several verifies (several reward functions, several steps) finds its dispatch every time,
        and its health verdict still finds it after them."""
        return self._lookup(names, False)

    def find(self, name: RolloutName, consume: bool = False, locked: bool = False) -> DispatchLink | None:
        """The dispatch ``name`` names (see :meth:`take_many`), kept: :meth:`find_many` of one name,
        the lookup a verify after its dispatch makes, once per call.

        When every dispatch remembered is already indexed (a run's verifies come after its
        dispatches), it reads without the lock: a lookup that keeps what it finds changes nothing,
        and one that meets the memory mid-change (an index half built, a batch let go) finds
        nothing, and is made again under the lock, as is every lookup that finds nothing.

        It is the one way a name finds its dispatch: :meth:`take_many` and :meth:`find_many` call
        it for each of theirs, holding the lock (``locked``), forgetting what it finds when
        ``consume`` (only ever with the lock held)."""
        if not locked and (self._pending or self._index_next != self._sealed_next):
            return self._lookup((name,), consume)[0]  # (not everything indexed yet)
        rollout_id, task_index, rollout_index = name if len(name) == 3 else name[:3]
        if rollout_id is None and task_index is None and len(name) > 3 and name[3] is not None:
            link = self._find_task(name, consume)  # by task id and repeat
            return link if link is not None or locked else self._lookup((name,), consume)[0]
        attempt_wanted = None
        bare = None if task_index is None or rollout_index is None else index_form(task_index, rollout_index, None)
        if rollout_id is not None and rollout_id != bare:
            # (NeMo Gym's usual verdict names its own indices in the bare form: nothing to parse then)
            parsed = parse_index_form(rollout_id)
            if parsed is None:
                link = self._find_custom(rollout_id, consume)
                return link if link is not None or locked else self._lookup((name,), consume)[0]
            if bare is None:
                task_index, rollout_index, attempt_wanted = parsed
                bare = index_form(task_index, rollout_index, None)
            elif (task_index, rollout_index) != parsed[:2]:
                return None  # a name that contradicts itself names no dispatch
            else:
                attempt_wanted = parsed[2]
        elif bare is None:
            return None  # no indices and no id: it names nothing
        elif rollout_id is not None:
            bare = rollout_id  # (the name's own string, equal: the link holds no second copy of it)
        primary = _index_key(task_index, rollout_index)  # (both known here)
        sequence = self._index.get(primary)
        try:
            batch = None if sequence is None else self._batches[sequence >> _BATCH_BITS]
        except KeyError:  # (without the lock: let go meanwhile)
            batch = None
        if batch is None:
            return None if locked else self._lookup((name,), consume)[0]
        offset = sequence & _OFFSET_MASK  # type: ignore[operator]  # (a batch was found for it)
        attempt = 0 if batch.plain else batch.attempt(offset)  # (a plain batch holds no attempt: told without a call)
        if attempt_wanted is not None and attempt_wanted != attempt and attempt != _ATTEMPT_MAX:
            # An attempt-qualified id names an attempt a retry has replaced.
            return None if locked else self._lookup((name,), consume)[0]
        custom_of_index = self._custom_of_index
        custom_id = custom_of_index.get(primary) if custom_of_index else None
        if consume:
            del self._index[primary]
            if custom_id is not None:
                del custom_of_index[primary]
                del self._index_of_custom[custom_id]
            if self._task_of_primary and (task := self._task_of_primary.pop(primary, None)) is not None:
                del self._primary_of_task[task]
        if custom_id is not None:
            return batch.link(offset, custom_id)  # found by its indices, named by its own id
        return batch.link(offset, index_form(task_index, rollout_index, attempt) if attempt else bare)

    def _lookup(self, names: Sequence[RolloutName], consume: bool) -> list[DispatchLink | None]:
        with self._lock:
            # (everything sealed and indexed already, the usual lookup of a verify after its dispatch: nothing to do)
            evicted = self._index_everything() if self._pending or self._index_next != self._sealed_next else 0
            find = self.find
            found = [find(name, consume, True) for name in names]
            if consume and not self._index:
                self._index = {}  # every dispatch found: its table's memory goes too (a dict never shrinks)
        if evicted:
            self._report(evicted)
        return found

    def _find_task(self, name: RolloutName, consume: bool) -> DispatchLink | None:
        """The latest attempt of the dispatch of ``name``'s task id and repeat (only the attempt it
        names, when it names one), forgotten when ``consume``, named by the dispatch's rollout id."""
        task_id, repeat = name[3], name[2]
        found = self._primary_of_task.get((task_id, repeat)) if repeat is not None else None
        if found is None:
            return None
        primary, rollout_id = found
        sequence = self._index.get(primary)
        batch = None if sequence is None else self._batches.get(sequence >> _BATCH_BITS)
        if batch is None:  # (without the lock: let go meanwhile)
            return None
        offset = sequence & _OFFSET_MASK  # type: ignore[operator]  # (a batch was found for it)
        attempt_wanted = name[4] if len(name) > 4 else None
        attempt = batch.attempt(offset)
        if attempt_wanted is not None and attempt_wanted != attempt and attempt != _ATTEMPT_MAX:
            return None  # a retry has replaced the attempt it names
        if consume:
            self._discard_primary(primary)
        return batch.link(offset, rollout_id)

    def _find_custom(self, custom_id: str, consume: bool) -> DispatchLink | None:
        """The dispatch with this custom rollout id, forgotten when ``consume``."""
        primary: int | str = self._index_of_custom.get(custom_id, custom_id)
        sequence = self._index.get(primary)
        batch = None if sequence is None else self._batches.get(sequence >> _BATCH_BITS)
        if batch is None:  # (without the lock: let go meanwhile)
            return None
        if consume:
            self._discard_primary(primary)
        return batch.link(sequence & _OFFSET_MASK, custom_id)  # type: ignore[operator]  # (a batch was found for it)


# A forked child starts with an empty memory and fresh locks: a lock another thread held at the
# fork is never released in the child (its next dispatch would hang there), and the parent's
# dispatches are the parent's to report (a child reporting them too would duplicate their health
# spans). A spawned child imports the package anew and starts empty anyway.
_ALL_LINKS: weakref.WeakSet[DispatchLinks] = weakref.WeakSet()


def _forget_in_forked_child() -> None:
    for links in list(_ALL_LINKS):
        links._empty()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)
