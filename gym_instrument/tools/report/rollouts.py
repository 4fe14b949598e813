"""Every rollout of a run: read from its spans into compact records, joined, then decided once.

The report reads every span before it scores anything, so no figure depends on the order the
spans are read in: a verify read before its dispatch, a dispatch read between its verifies (the
files of several processes, read one after another) and a verdict read before both all land on
one record (:class:`RolloutStore`).

**The join.** A rollout is one trace id and rollout id: every span of the package that names
both lands on one record. A span without a rollout id is joined by its span context instead: a
dispatch by its own span id; a verify, a verdict or a model call by its parent's (in one process
a verify is a child of its dispatch, and a verdict always is). What is left without a dispatch
once everything is read joins its trace's dispatch when the trace has exactly one and one of the
two has no rollout id (a verify in another process that got no baggage); in a trace whose dispatch
was not read, what has no rollout id is one rollout.

**The decision** (:func:`decide`). A rollout's verifies, in the order they started, and the
reward rule of the last one (``nemo.gym.rollout.reward_rule``: ``last`` when absent, ``sum``,
``max`` or ``first``) say which verify decides: the last, the first, the one with the highest
reward (the earliest of equals; the last when none has a reward), or under ``sum`` all of them.
What decides says what the rollout is, in this order: a failure kind (an infrastructure
failure), masked (an infrastructure failure too), a numeric reward (scored), else unscored. A
masked verify's reward never counts, whatever reward attribute it also carries and whatever the
rule. A failed dispatch makes its rollout a failure whatever its verifies say.

**Memory.** Arrays; no span is kept. About 70 bytes a rollout (its key in an open-addressing
table, the low half of its trace id, task, error type, dispatch start, verdict and its start,
checks, first verify), 12 more in a run whose dispatches name a training step (its step and policy
version; nothing in a run without), and 25 a verify (start, reward, flags, failure kind, the next
verify of its rollout). Each distinct error type, failure kind, verdict and list of checks is kept once. Up to
``ROLLOUT_CAPACITY`` rollouts and ``VERIFY_CAPACITY`` verifies: the spans of rollouts beyond are
counted (``spans_not_kept``), not joined.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from gym_instrument import semconv

ROLLOUT_CAPACITY = 4_000_000  # about 280 MB of records at most
VERIFY_CAPACITY = 16_000_000  # about 400 MB of verifies at most
TOKEN_ROLLOUTS = 1_000_000  # rollouts whose token counts are kept (a list each)
RULES = semconv.REWARD_RULES  # a rule's code is its position: "last" is 0
_MASK64 = (1 << 64) - 1

# A record's flags.
DISPATCHED = 1  # its dispatch span was read
FAILED = 2  # that dispatch failed
NAMED = 4  # keyed by a rollout id (else by a span id)
REPLACED = 8  # a failed attempt that a later attempt of its task and repeat replaced: not a rollout
MERGED = 16  # joined into another record after the read

# A verify's bits: masked, has a numeric reward, and its rule's code above them.
_MASKED = 1
_REWARD = 2


def rollout_key(trace_id: str, rollout_id: str | None, span_id: str | None = None) -> int:
    """A rollout's key: its trace and its rollout id, else the span id that stands for it (never 0)."""
    name = hash(rollout_id) if rollout_id is not None else hash(("span", span_id))
    key = (int(trace_id[16:], 16) ^ (name & _MASK64)) & _MASK64
    return key or 1


class Verify(NamedTuple):
    """One verify span of a rollout, as the decision needs it."""

    start: int
    reward: float | None  # the numeric, finite reward attribute (a masked verify's too: it never counts)
    masked: bool
    failure_kind: str | None
    rule: str


class Decision(NamedTuple):
    """What a rollout's verifies say: a failure kind, or masked, or a reward, or none of these (unscored)."""

    reward: float | None
    masked: bool
    failure_kind: str | None


def _order(verify: Verify) -> tuple[Any, ...]:
    # By start; equal starts in a fixed order, so that the read order never decides.
    return (verify.start, verify.reward is not None, verify.reward or 0.0, verify.masked, verify.failure_kind or "", verify.rule)


def _said_by(verify: Verify) -> Decision:
    if verify.failure_kind is not None:
        return Decision(None, False, verify.failure_kind)
    if verify.masked:
        return Decision(None, True, None)
    return Decision(verify.reward, False, None)


def decide(verifies: Sequence[Verify]) -> Decision:
    """A rollout's reward, mask or failure kind from all its verifies (at least one), by its rule.

    >>> steps = [Verify(1, 0.0, False, None, "max"), Verify(2, 1.0, False, None, "max"), Verify(3, 0.0, False, None, "max")]
    >>> decide(steps)
    Decision(reward=1.0, masked=False, failure_kind=None)
    """
    ordered = sorted(verifies, key=_order) if len(verifies) > 1 else list(verifies)
    rule = ordered[-1].rule
    if rule == "sum":  # every step decides
        kinds = [verify.failure_kind for verify in ordered if verify.failure_kind is not None]
        if kinds:
            return Decision(None, False, kinds[-1])
        if any(verify.masked for verify in ordered):
            return Decision(None, True, None)
        rewards = [verify.reward for verify in ordered if verify.reward is not None]
        return Decision(sum(rewards) if rewards else None, False, None)
    if rule == "max":
        candidates = [verify for verify in ordered if verify.reward is not None and not verify.masked]
        # max() keeps the first of equals: the earliest step.
        deciding = max(candidates, key=lambda verify: verify.reward or 0.0) if candidates else ordered[-1]
    elif rule == "first":
        deciding = ordered[0]
    else:
        deciding = ordered[-1]
    return _said_by(deciding)


class Interned:
    """Distinct values (error types, failure kinds, verdicts, lists of checks), each kept once, by number."""

    def __init__(self) -> None:
        self._numbers: dict[Hashable, int] = {}
        self.values: list[Any] = []

    def number(self, value: Hashable) -> int:
        number = self._numbers.get(value)
        if number is None:
            number = self._numbers[value] = len(self.values)
            self.values.append(value)
        return number


class KeyIndex:
    """64-bit keys to record numbers: open addressing in two arrays, about 24 bytes a key."""

    def __init__(self) -> None:
        self.size = 0
        self._allocate(1 << 12)

    def _allocate(self, slots: int) -> None:
        self.keys = array("Q", bytes(8 * slots))
        self.rows = array("i", bytes(4 * slots))
        self.mask = slots - 1

    def find(self, key: int) -> int:
        """The record of ``key``, or -1."""
        keys, mask = self.keys, self.mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == key:
                return self.rows[slot]
            if found == 0:
                return -1
            slot = (slot + 1) & mask

    def add(self, key: int, row: int) -> None:
        """Add a key that is not there yet."""
        if 2 * (self.size + 1) > len(self.keys):
            keys, rows = self.keys, self.rows
            self._allocate(2 * len(keys))
            for old, known in enumerate(keys):
                if known:
                    self._put(known, rows[old])
        self._put(key, row)
        self.size += 1

    def _put(self, key: int, row: int) -> None:
        keys, mask = self.keys, self.mask
        slot = key & mask
        while keys[slot]:
            slot = (slot + 1) & mask
        keys[slot] = key
        self.rows[slot] = row


class RolloutStore:
    """The records of a run's rollouts, filled span by span (:meth:`record`, then :meth:`dispatched`,
    :meth:`verified`, :meth:`judged`, :meth:`add_tokens`), then joined once (:meth:`join`)."""

    def __init__(self, capacity: int = ROLLOUT_CAPACITY, verify_capacity: int = VERIFY_CAPACITY) -> None:
        self.capacity = capacity
        self.verify_capacity = verify_capacity
        self.index = KeyIndex()
        self.trace = array("Q")  # the low 64 bits of its trace id
        self.flags = bytearray()
        self.task = array("i")  # its task's number (-1: no dispatch read)
        self.error = array("i")  # its dispatch's error type (-1: none)
        self.dispatch_start = array("q")
        self.verify_head = array("i")  # its latest-read verify (-1: none); each verify names the one before
        self.verdict = array("i")  # its verdict (-1: none)
        self.verdict_start = array("q")
        self.checks = array("i")  # its verdict's checks (a sorted tuple)
        self.verify_start = array("q")
        self.verify_reward = array("d")
        self.verify_bits = bytearray()
        self.verify_kind = array("i")
        self.verify_next = array("i")
        # Its dispatch's training step (-1: none) and policy version (-1: none): made when a dispatch
        # first names one, so a run without steps keeps nothing for them.
        self.step: array[int] | None = None
        self.policy: array[int] | None = None
        self.names = Interned()  # error types, failure kinds, verdicts, policy versions
        self.check_lists = Interned()
        self.tokens: dict[int, list[int]] = {}  # record -> [dispatch in, out, calls, has totals, spans' in, out, calls]
        self.merged_into: dict[int, int] = {}
        self.duplicate_dispatches = 0  # a second dispatch span of one trace and rollout id (the later one counts)
        self.spans_not_kept = 0
        self.verifies_not_kept = 0
        self.tokens_not_kept = 0
        self._joined = False

    @property
    def size(self) -> int:
        return len(self.flags)

    def record(self, trace_id: str, rollout_id: str | None, span_id: str | None) -> int:
        """The record of a rollout, made when new (-1 when the store is full)."""
        key = rollout_key(trace_id, rollout_id, span_id)
        row = self.index.find(key)
        if row >= 0:
            return row
        row = len(self.flags)
        if row >= self.capacity:
            self.spans_not_kept += 1
            return -1
        self.index.add(key, row)
        self.trace.append(int(trace_id[16:], 16))
        self.flags.append(NAMED if rollout_id is not None else 0)
        for column in (self.task, self.error, self.verify_head, self.verdict, self.checks):
            column.append(-1)
        self.dispatch_start.append(0)
        self.verdict_start.append(0)
        if self.step is not None and self.policy is not None:
            self.step.append(-1)
            self.policy.append(-1)
        return row

    def dispatched(
        self, row: int, task: int, error_type: str | None, start: int, step: int | None = None, policy: str | None = None
    ) -> None:
        """Its dispatch: task, error type, start, and the training step and policy version it names."""
        flags = self.flags[row]
        failed = error_type is not None
        if flags & DISPATCHED:
            self.duplicate_dispatches += 1
            known = (self.dispatch_start[row], bool(flags & FAILED))
            if (start, failed) < known:
                return
        self.flags[row] = (flags | DISPATCHED | FAILED) if failed else ((flags | DISPATCHED) & ~FAILED)
        self.task[row] = task
        self.error[row] = self.names.number(error_type) if failed else -1
        self.dispatch_start[row] = start
        if self.step is None and (step is not None or policy is not None):
            size = len(self.flags)
            self.step, self.policy = array("q", [-1]) * size, array("i", [-1]) * size
        if self.step is not None and self.policy is not None:
            self.step[row] = -1 if step is None else step
            self.policy[row] = -1 if policy is None else self.names.number(policy)

    def verified(self, row: int, start: int, reward: float | None, masked: bool, failure_kind: str | None, rule: str) -> None:
        number = len(self.verify_bits)
        if number >= self.verify_capacity:
            self.verifies_not_kept += 1
            return
        self.verify_start.append(start)
        self.verify_reward.append(0.0 if reward is None else reward)
        code = RULES.index(rule) if rule in RULES else 0
        self.verify_bits.append((_MASKED if masked else 0) | (0 if reward is None else _REWARD) | (code << 2))
        self.verify_kind.append(-1 if failure_kind is None else self.names.number(failure_kind))
        self.verify_next.append(self.verify_head[row])
        self.verify_head[row] = number

    def judged(self, row: int, verdict: str, checks: tuple[str, ...], start: int) -> None:
        """A verdict for the rollout: the one that started last counts (a later health pass re-judged it)."""
        if self.verdict[row] >= 0:
            known = (self.verdict_start[row], self.names.values[self.verdict[row]], self.check_lists.values[self.checks[row]])
            if (start, verdict, checks) < known:
                return
        self.verdict[row] = self.names.number(verdict)
        self.verdict_start[row] = start
        self.checks[row] = self.check_lists.number(checks)

    def add_tokens(self, row: int, tokens_in: int, tokens_out: int, calls: int, from_dispatch: bool) -> None:
        counts = self.tokens.get(row)
        if counts is None:
            if len(self.tokens) >= TOKEN_ROLLOUTS:
                self.tokens_not_kept += 1
                return
            counts = self.tokens[row] = [0, 0, 0, 0, 0, 0, 0]
        if from_dispatch:  # a dispatch's own totals (a second dispatch span of the rollout: the same totals again)
            counts[0:4] = [tokens_in, tokens_out, calls, 1]
        else:
            counts[4] += tokens_in
            counts[5] += tokens_out
            counts[6] += calls

    # -- after the read ---------------------------------------------------------------------------

    def verifies(self, row: int) -> list[Verify]:
        found = []
        number = self.verify_head[row]
        while number >= 0:
            bits = self.verify_bits[number]
            kind = self.verify_kind[number]
            found.append(
                Verify(
                    self.verify_start[number],
                    self.verify_reward[number] if bits & _REWARD else None,
                    bool(bits & _MASKED),
                    None if kind < 0 else self.names.values[kind],
                    RULES[bits >> 2],
                )
            )
            number = self.verify_next[number]
        return found

    def verdict_of(self, row: int) -> tuple[str, tuple[str, ...]] | None:
        number = self.verdict[row]
        return None if number < 0 else (self.names.values[number], self.check_lists.values[self.checks[row]])

    def step_of(self, row: int) -> tuple[int | None, str | None]:
        """Its dispatch's training step and policy version (None, None: it named neither, or no dispatch did)."""
        if self.step is None or self.policy is None:
            return None, None
        step, policy = self.step[row], self.policy[row]
        return (None if step < 0 else step), (None if policy < 0 else self.names.values[policy])

    def error_of(self, row: int) -> str | None:
        number = self.error[row]
        return None if number < 0 else self.names.values[number]

    def tokens_of(self, row: int) -> tuple[int, int, int, bool] | None:
        """A rollout's (input, output, model calls, from its dispatch's totals): its dispatch's totals win over its spans."""
        counts = self.tokens.get(row)
        if counts is None:
            return None
        if counts[3]:
            return counts[0], counts[1], counts[2], True
        return counts[4], counts[5], counts[6], False

    def resolve(self, row: int) -> int:
        """The record a record was joined into (itself when it was not)."""
        while row in self.merged_into:
            row = self.merged_into[row]
        return row

    def join(self) -> None:
        """Join what has no dispatch to its trace's only dispatch, when one of the two has no rollout id."""
        if self._joined:
            return
        self._joined = True
        flags, trace = self.flags, self.trace
        waiting: dict[int, list[int]] = {}
        for row in range(len(flags)):
            if not flags[row] & DISPATCHED:
                waiting.setdefault(trace[row], []).append(row)
        if not waiting:
            return
        dispatches: dict[int, list[int]] = {}
        for row in range(len(flags)):
            if flags[row] & DISPATCHED and trace[row] in waiting:
                dispatches.setdefault(trace[row], []).append(row)
        for trace_low, rows in waiting.items():
            found = dispatches.get(trace_low)
            if found is None:  # no dispatch read in this trace: what names no rollout id is one rollout
                unnamed = [row for row in rows if not flags[row] & NAMED]
                for row in unnamed[1:]:
                    self._merge(row, unnamed[0])
                continue
            if len(found) != 1:
                continue
            (target,) = found
            for row in rows:
                if not (flags[row] & NAMED and flags[target] & NAMED):
                    self._merge(row, target)

    def _merge(self, row: int, target: int) -> None:
        head = self.verify_head[row]
        if head >= 0:
            tail = head
            while self.verify_next[tail] >= 0:
                tail = self.verify_next[tail]
            self.verify_next[tail] = self.verify_head[target]
            self.verify_head[target] = head
            self.verify_head[row] = -1
        found = self.verdict_of(row)
        if found is not None:
            self.judged(target, found[0], found[1], self.verdict_start[row])
            self.verdict[row] = -1
        counts = self.tokens.pop(row, None)
        if counts is not None:
            self.add_tokens(target, counts[4], counts[5], counts[6], from_dispatch=False)
        self.flags[row] |= MERGED
        self.merged_into[row] = target
