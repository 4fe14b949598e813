"""The figures of a run, aggregated from its spans in one pass and in bounded memory.

What grows with the run, and what does not:

- per task: one :class:`TaskStats` (counts, running mean and variance, min and max, and a count
  per distinct reward value rounded to 0.01, at most 101 values): grows with the number of tasks,
  not with rollouts or repeats;
- per distinct ``error.type``, verdict and check: one counter each;
- fixed-size lists: the slowest rollouts, the first unhealthy and the first failed rollouts;
- durations: a log-bucket sketch (2 % relative error on p50 / p95; the max is exact): at most a
  few thousand buckets whatever the run;
- the join of a verify to its dispatch: a verify and its dispatch are matched by trace id and
  rollout id; only the ones whose partner has not been read yet are held. In a file from one
  process that is about one export batch; when the verify spans are in another file read later
  (another process), one small entry per rollout until then, up to ``join_capacity`` (oldest
  dropped first, counted in ``verifies_without_dispatch``).
- reward against verdict: one compact entry per rollout (:class:`RolloutMemo`: 8 bytes of key, 8
  of reward, 1 of verdict, in arrays, about 34 MB for a million rollouts), because a run's health
  pass comes after its whole collection;
- the all-rollouts table: the first ``rollout_rows`` rollouts (counts stay exact);
- retries: the attempts of a (task index, repeat) that failed or was retried, up to ``CHAINS``.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import Any, cast

from gym_instrument import semconv
from gym_instrument.schema import parse_index_form
from gym_instrument.tools.report.otlp import STATUS_ERROR, ReadStats, Span

# Replay marks what it made (gym_instrument.tools.replay): the report says so, and leaves placeholder
# durations out of the time figures.
REPLAYED = "gym.replayed"
REPLAY_TIMING = "gym.replay.timing"
TIMING_PLACEHOLDER = "placeholder"

SLOWEST = 20
DISCRETE_VALUES = 6  # up to this many distinct rewards: a bar per value; more: a histogram
REWARD_BINS = 20
LISTED = 500  # unhealthy and failed rollouts listed by name (all are counted)
REWARD_VALUES = 101  # distinct rounded reward values kept per task for the pictures
JOIN_CAPACITY = 1_000_000
NO_TASK = "(no task id)"
ROLLOUT_ROWS = 2000  # rollouts kept one by one for the all-rollouts table (all are counted)
CHAINS = 20_000  # (task index, repeat) pairs followed for retries
MEMO_CAPACITY = 16_000_000  # rollouts whose reward is crossed with their verdict
NO_AGENT = "(no agent name)"
SEVERAL = "(several)"
VERDICT_CODES = {"healthy": 1, "unhealthy": 2, "unobserved": 3}
VERDICT_NAMES = {0: "no verdict", 1: "healthy", 2: "unhealthy", 3: "unobserved", 4: "other verdict"}
REWARD_CLASSES = ("success", "below threshold", "masked", "unscored", "no verify")
_MASK64 = (1 << 64) - 1


def readable_task(task_id: str) -> tuple[str, str | None]:
    """A task id as a person reads it, and its taskset.

    NeMo Gym 0.7.0's native task ids are mappings, rendered as compact JSON on the span
    (``{"task_id":"native-ohm","taskset":"e2e_mcqa_native"}``): shown as ``e2e_mcqa_native/native-ohm``,
    the taskset first, then the other values in key order.
    """
    if not task_id.startswith("{"):
        return task_id, None
    try:
        mapping = json.loads(task_id)
    except ValueError:
        return task_id, None
    if type(mapping) is not dict or not mapping:
        return task_id, None
    taskset = mapping.get("taskset")
    parts = [] if taskset is None else [str(taskset)]
    parts += [
        value if type(value) is str else json.dumps(value, separators=(",", ":"))
        for key, value in sorted(mapping.items())
        if key != "taskset"
    ]
    return "/".join(parts), None if taskset is None else str(taskset)


def rollout_key(trace_id: str, rollout_id: str | None) -> int:
    """One rollout's key in a run: its trace and its rollout id (one trace may hold many rollouts)."""
    key = (int(trace_id[16:], 16) ^ (hash(rollout_id or "") & _MASK64)) & _MASK64
    return key or 1


class RolloutMemo:
    """Each rollout's reward and verdict, in open-addressing arrays: a few dozen bytes a rollout.

    The reward is NaN until its verify is read, +inf when masked, -inf when there is no numeric
    reward; the verdict a code of ``VERDICT_CODES`` (0: none yet, 4: another verdict).
    """

    def __init__(self, capacity: int = MEMO_CAPACITY) -> None:
        self.capacity = capacity
        self.size = 0
        self.full = 0  # rollouts not kept: over capacity
        self._allocate(1 << 10)

    def _allocate(self, slots: int) -> None:
        self.keys = array("Q", bytes(8 * slots))
        self.rewards = array("d", [math.nan]) * slots
        self.verdicts = bytearray(slots)
        self.mask = slots - 1

    def _slot(self, key: int, insert: bool) -> int:
        keys, mask = self.keys, self.mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == key:
                return slot
            if found == 0:
                if not insert:
                    return -1
                if self.size >= self.capacity:
                    self.full += 1
                    return -1
                if 2 * (self.size + 1) > len(keys):
                    self._grow()
                    return self._slot(key, insert)
                keys[slot] = key
                self.size += 1
                return slot
            slot = (slot + 1) & mask

    def _grow(self) -> None:
        keys, rewards, verdicts = self.keys, self.rewards, self.verdicts
        self._allocate(2 * len(keys))
        new_keys, new_rewards, new_verdicts, mask = self.keys, self.rewards, self.verdicts, self.mask
        for old, key in enumerate(keys):
            if key:
                slot = key & mask
                while new_keys[slot]:
                    slot = (slot + 1) & mask
                new_keys[slot], new_rewards[slot], new_verdicts[slot] = key, rewards[old], verdicts[old]

    def add(self, key: int) -> None:
        self._slot(key, True)

    def set_reward(self, key: int, reward: float) -> None:
        slot = self._slot(key, True)
        if slot >= 0:
            self.rewards[slot] = reward

    def set_verdict(self, key: int, verdict: int) -> None:
        slot = self._slot(key, True)
        if slot >= 0:
            self.verdicts[slot] = verdict

    def get(self, key: int) -> tuple[float, int] | None:
        slot = self._slot(key, False)
        return None if slot < 0 else (self.rewards[slot], self.verdicts[slot])

    def crossed(self, threshold: float) -> dict[str, dict[str, int]]:
        """Rollouts counted by reward class (``REWARD_CLASSES``) and verdict."""
        counts: Counter[tuple[str, int]] = Counter()
        for key, reward, verdict in zip(self.keys, self.rewards, self.verdicts, strict=True):
            if key:
                counts[(reward_class(reward, threshold), verdict)] += 1
        return {
            name: {VERDICT_NAMES[code]: counts[(name, code)] for code in VERDICT_NAMES if counts[(name, code)]}
            for name in REWARD_CLASSES
            if any(counts[(name, code)] for code in VERDICT_NAMES)
        }


INFRA_LIMIT = 0.05  # the share of infrastructure failures a run may have before the report says so (and exits non-zero)
MASKED_KIND = "masked"


class InfraFailures:
    """Rollouts that failed for a reason other than the model's answer, counted apart from honest zeros.

    It takes one fact per dispatch (:meth:`dispatched`) and one per scored verify (:meth:`verified`).
    A rollout is an infrastructure failure when its dispatch failed (its kind: the ``error.type``),
    its verify names a failure kind (``nemo.gym.failure_kind``; whatever the reward, usually 0), or its
    verify was masked (kind ``masked``). An honest zero is a numeric reward of 0 with none of these.
    A failed attempt that a retry of the same (task index, repeat) replaced is not a rollout of its
    own (:meth:`figures` takes those attempts). Memory: a few counters per task.
    """

    def __init__(self, limit: float = INFRA_LIMIT) -> None:
        self.limit = limit
        self.dispatches: Counter[str] = Counter()  # per task label
        self.kinds: dict[str, Counter[str]] = {}  # per task label: failures by kind
        self.honest_zeros: Counter[str] = Counter()

    def dispatched(self, task: str, error_type: str | None) -> None:
        self.dispatches[task] += 1
        if error_type is not None:
            self._fail(task, error_type)

    def verified(self, task: str, reward: float | None, masked: bool, failure_kind: str | None) -> None:
        if failure_kind is not None:
            self._fail(task, failure_kind)
        elif masked:
            self._fail(task, MASKED_KIND)
        elif reward == 0.0:
            self.honest_zeros[task] += 1

    def _fail(self, task: str, kind: str) -> None:
        kinds = self.kinds.get(task)
        if kinds is None:
            kinds = self.kinds[task] = Counter()
        kinds[kind] += 1

    def figures(self, replaced: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
        """The run's and each task's counts; ``replaced``: (task, error type) of each failed attempt a retry replaced."""
        dispatches = Counter(self.dispatches)
        kinds = {task: Counter(counts) for task, counts in self.kinds.items()}
        left_out = 0
        for task, error_type in replaced:
            counts = kinds.get(task)
            if counts is not None and counts[error_type] > 0:
                counts[error_type] -= 1
                dispatches[task] -= 1
                left_out += 1
        tasks = {}
        run_kinds: Counter[str] = Counter()
        for task in dispatches:
            counts = +kinds.get(task, Counter())
            run_kinds.update(counts)
            failures = sum(counts.values())
            tasks[task] = {
                "rollouts": dispatches[task],
                "failures": failures,
                "share": failures / dispatches[task] if dispatches[task] else None,
                "kinds": dict(counts.most_common()),
                "honest_zeros": self.honest_zeros[task],
            }
        rollouts = sum(dispatches.values())
        failures = sum(run_kinds.values())
        share = failures / rollouts if rollouts else None
        return {
            "over": "rollouts: dispatches less the failed attempts a retry replaced",
            "rollouts": rollouts,
            "failures": failures,
            "share": share,
            "kinds": dict(run_kinds.most_common()),
            "honest_zeros": sum(self.honest_zeros.values()),
            "replaced_attempts": left_out,
            "limit": self.limit,
            "over_limit": share is not None and share > self.limit,
            "tasks": tasks,
        }


# Model calls (OpenTelemetry GenAI semantic conventions) and a rollout's token totals on its dispatch.
GEN_AI_OPERATION = semconv.GEN_AI_OPERATION
GEN_AI_REQUEST_MODEL = semconv.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_MODEL = semconv.GEN_AI_RESPONSE_MODEL
GEN_AI_INPUT_TOKENS = semconv.GEN_AI_INPUT_TOKENS
GEN_AI_OUTPUT_TOKENS = semconv.GEN_AI_OUTPUT_TOKENS
GEN_AI_FINISH_REASONS = semconv.GEN_AI_FINISH_REASONS
ROLLOUT_MODEL_CALLS = semconv.ROLLOUT_MODEL_CALLS
TOKEN_ROLLOUTS = 1_000_000  # rollouts whose tokens are kept for tokens against reward
RECENT_DISPATCHES = 100_000  # dispatches remembered for the model-call spans read after them


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


class TokenFigures:
    """Tokens per rollout and per task (mean, p95), the slowest model calls, and tokens against reward.

    A rollout's tokens are its dispatch's totals (``gen_ai.usage.input_tokens`` / ``output_tokens``,
    ``nemo.gym.rollout.model_calls``) when it has them, else the sum of its model-call spans (kind
    CLIENT, ``gen_ai.operation.name``), matched by trace id and ``nemo.gym.rollout.id``. Memory: a
    few dozen bytes per rollout with tokens (its total and task, up to ``TOKEN_ROLLOUTS``, for the
    per-task quantiles and tokens against reward); the model calls of rollouts whose dispatch is not
    read yet; the last ``RECENT_DISPATCHES`` dispatches (for model calls read after them).
    """

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        self.model_calls = 0
        self.model_call_spans = 0
        self.model_call_errors: Counter[str] = Counter()
        self.from_dispatch = 0
        self.from_spans = 0
        self.calls: dict[int, list[int]] = {}  # rollout key -> [input, output, calls] of spans not yet matched
        self.recent: OrderedDict[int, str | None] = OrderedDict()  # key -> task label; None: had its own totals
        self.per_rollout: dict[int, tuple[int, str]] = {}  # key -> (tokens, task)
        self.not_kept = 0
        self.slowest: list[tuple[int, int, dict[str, Any]]] = []
        self._sequence = 0

    def model_call(self, span: Span, key: int, trace_url: str | None) -> None:
        attributes = span.attributes
        self.model_call_spans += 1
        error = attributes.get(semconv.ERROR_TYPE)
        if error is not None or span.status_code == STATUS_ERROR:
            self.model_call_errors[str(error) if error is not None else "(error without error.type)"] += 1
        reported_in = _count(attributes.get(GEN_AI_INPUT_TOKENS))  # (None: not reported)
        reported_out = _count(attributes.get(GEN_AI_OUTPUT_TOKENS))
        tokens_in, tokens_out = reported_in or 0, reported_out or 0
        if span.end_ns >= span.start_ns > 0:
            duration = span.end_ns - span.start_ns
            self._sequence += 1
            if len(self.slowest) < SLOWEST or duration > self.slowest[0][0]:
                entry = {
                    "name": span.name,
                    "model": attributes.get(GEN_AI_RESPONSE_MODEL) or attributes.get(GEN_AI_REQUEST_MODEL),
                    "rollout_id": attributes.get(semconv.ROLLOUT_ID),
                    "duration_ms": duration / 1e6,
                    "input_tokens": reported_in,
                    "output_tokens": reported_out,
                    "finish_reasons": attributes.get(GEN_AI_FINISH_REASONS),
                    "error_type": error,
                    "trace_id": span.trace_id,
                }
                if trace_url:
                    entry["trace_url"] = trace_link(trace_url, span.trace_id, span.span_id)
                item = (duration, self._sequence, entry)
                if len(self.slowest) < SLOWEST:
                    heapq.heappush(self.slowest, item)
                else:
                    heapq.heapreplace(self.slowest, item)
        if key in self.recent:
            task = self.recent[key]
            if task is not None:  # its dispatch had no totals: this call counts now
                self._fold(key, task, tokens_in, tokens_out, 1, from_dispatch=False)
            return
        sums = self.calls.get(key)
        if sums is None:
            sums = self.calls[key] = [0, 0, 0]
        sums[0] += tokens_in
        sums[1] += tokens_out
        sums[2] += 1

    def dispatch(self, attributes: dict[str, Any], key: int, task: str) -> None:
        tokens_in, tokens_out = _count(attributes.get(GEN_AI_INPUT_TOKENS)), _count(attributes.get(GEN_AI_OUTPUT_TOKENS))
        if tokens_in is not None or tokens_out is not None:
            calls = _count(attributes.get(ROLLOUT_MODEL_CALLS)) or 0
            self.calls.pop(key, None)  # its own totals win over its spans
            self._fold(key, task, tokens_in or 0, tokens_out or 0, calls, from_dispatch=True)
            self._remember(key, None)
            return
        sums = self.calls.pop(key, None)
        if sums is not None:
            self._fold(key, task, sums[0], sums[1], sums[2], from_dispatch=False)
        self._remember(key, task)

    def _remember(self, key: int, task: str | None) -> None:
        self.recent[key] = task
        if len(self.recent) > RECENT_DISPATCHES:
            self.recent.popitem(last=False)

    def _fold(self, key: int, task: str, tokens_in: int, tokens_out: int, calls: int, from_dispatch: bool) -> None:
        """Count a rollout's tokens (or, for a model call read after its dispatch, add to them)."""
        self.input_tokens += tokens_in
        self.output_tokens += tokens_out
        self.model_calls += calls
        known = self.per_rollout.get(key)
        if known is None:
            self.from_dispatch += from_dispatch
            self.from_spans += not from_dispatch
            if len(self.per_rollout) < TOKEN_ROLLOUTS:
                self.per_rollout[key] = (tokens_in + tokens_out, task)
            else:
                self.not_kept += 1
        else:
            self.per_rollout[key] = (known[0] + tokens_in + tokens_out, known[1])

    def figures(self, reward_of: Any, threshold: float) -> dict[str, Any]:
        """``reward_of(key)``: the rollout's memo reward (NaN none, +inf masked, -inf unscored), or None."""
        for key, sums in self.calls.items():  # model calls whose dispatch was never read
            self._fold(key, "(model calls without a dispatch)", sums[0], sums[1], sums[2], from_dispatch=False)
        self.calls = {}
        run = DurationSketch()
        tasks: dict[str, DurationSketch] = {}
        by_reward: dict[str, DurationSketch] = {}
        for key, (total, task) in self.per_rollout.items():
            run.add(total)
            sketch = tasks.get(task)
            if sketch is None:
                sketch = tasks[task] = DurationSketch()
            sketch.add(total)
            known = reward_of(key)
            reward = known[0] if known is not None else math.nan
            value = reward_value(reward)
            label = "no verify" if value is None else (value if isinstance(value, str) else f"{round(value, 2):g}")
            group = by_reward.get(label)
            if group is None:
                group = by_reward[label] = DurationSketch()
            group.add(total)

        def stats(sketch: DurationSketch) -> dict[str, Any]:
            return {
                "rollouts": sketch.count,
                "mean": sketch.total / sketch.count if sketch.count else None,
                "p95": sketch.quantile(0.95),
                "max": sketch.max,
            }

        return {
            "rollouts": run.count,
            "from_dispatch_totals": self.from_dispatch,
            "from_model_call_spans": self.from_spans,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "model_call_spans": self.model_call_spans,
            "model_call_errors": dict(self.model_call_errors.most_common()),
            "per_rollout": stats(run),
            "tasks": {task: stats(sketch) for task, sketch in tasks.items()},
            "by_reward": [
                {"reward": label, **stats(sketch)}
                for label, sketch in sorted(by_reward.items(), key=lambda item: _reward_order(item[0]))
            ],
            "slowest_model_calls": [entry for _, _, entry in sorted(self.slowest, reverse=True)],
            "not_kept": self.not_kept,
        }


def _reward_order(label: str) -> tuple[int, float]:
    try:
        return (0, float(label))
    except ValueError:
        return (1, 0.0)


def reward_class(reward: float, threshold: float) -> str:
    if math.isnan(reward):
        return "no verify"
    if reward == math.inf:
        return "masked"
    if reward == -math.inf:
        return "unscored"
    return "success" if reward >= threshold else "below threshold"


def reward_value(reward: float) -> float | str | None:
    """A memo reward as the figures show it: a number, "masked", "unscored", or None (no verify)."""
    if math.isnan(reward):
        return None
    if reward == math.inf:
        return "masked"
    if reward == -math.inf:
        return "unscored"
    return reward


class DurationSketch:
    """Quantiles of positive durations in bounded memory: counts in log buckets of 2 % width."""

    GAMMA = 1.02
    _LOG_GAMMA = math.log(GAMMA)

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.zero = 0
        self.count = 0
        self.total = 0
        self.min: int | None = None
        self.max: int | None = None

    def add(self, nanos: int) -> None:
        self.count += 1
        self.total += nanos
        if self.min is None or nanos < self.min:
            self.min = nanos
        if self.max is None or nanos > self.max:
            self.max = nanos
        if nanos <= 0:
            self.zero += 1
        else:
            self.buckets[math.ceil(math.log(nanos) / self._LOG_GAMMA)] += 1

    def value_of(self, bucket: int) -> float:
        """A bucket's representative duration (within 1 % of every duration in it)."""
        return 2 * self.GAMMA**bucket / (self.GAMMA + 1)

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile (clamped to the exact min and max)."""
        if self.count == 0 or self.min is None or self.max is None:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = self.zero
        if rank <= seen:
            return 0.0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                return min(max(self.value_of(bucket), self.min), self.max)
        return float(self.max)

    def histogram(self, bins: int = 40) -> list[dict[str, float]]:
        """Counts in ``bins`` log-spaced bins between the min and the max (for a picture)."""
        if not self.buckets or self.min is None or self.max is None:
            return []
        low, high = min(self.buckets), max(self.buckets)
        width = max(1, math.ceil((high - low + 1) / bins))
        merged: Counter[int] = Counter()
        for bucket, count in self.buckets.items():
            merged[(bucket - low) // width] += count
        return [
            {
                "from_ms": self.GAMMA ** (low + index * width - 1) / 1e6,
                "to_ms": self.GAMMA ** (low + (index + 1) * width - 1) / 1e6,
                "count": merged[index],
            }
            for index in range(max(merged) + 1)
        ]

    def linear_histogram(self, bins: int | None = None) -> dict[str, Any]:
        """Counts in ``bins`` equal bins from 0 to the p99 (to the max when it is near): a linear axis.

        Durations past the last edge are counted in ``beyond`` (one long tail would leave every bin but
        the first empty).
        """
        top = self.quantile(0.99)
        if top is None or self.max is None:
            return {"bins": [], "beyond": 0}
        if self.max <= 1.5 * top:
            top = float(self.max)
        if bins is None:  # about two bins per square root of the count: a few for a small run, 30 at most
            bins = max(5, min(30, round(2 * math.sqrt(self.count))))
        width = nice_step(top / bins) if top > 0 else 1.0
        bins = max(1, math.ceil(top / width))
        counts = [0] * bins
        beyond = 0
        counts[0] += self.zero
        for bucket, count in self.buckets.items():
            value = min(self.value_of(bucket), float(self.max))
            index = int(value / width)
            if index < bins:
                counts[index] += count
            elif value <= top * 1.0000001:
                counts[-1] += count
            else:
                beyond += count
        return {
            "bins": [
                {"from_ms": index * width / 1e6, "to_ms": (index + 1) * width / 1e6, "count": count}
                for index, count in enumerate(counts)
            ],
            "beyond": beyond,
        }


class TaskDurations:
    """Each task's dispatch durations in a sketch of its own (p50 / p95 per task): grows with tasks, not rollouts."""

    def __init__(self) -> None:
        self.tasks: dict[str, DurationSketch] = {}

    def add(self, task: str, nanos: int) -> None:
        sketch = self.tasks.get(task)
        if sketch is None:
            sketch = self.tasks[task] = DurationSketch()
        sketch.add(nanos)

    def figures(self, task: str) -> dict[str, float | None]:
        sketch = self.tasks.get(task)
        if sketch is None:
            return {"p50_ms": None, "p95_ms": None}
        p50, p95 = sketch.quantile(0.50), sketch.quantile(0.95)
        return {"p50_ms": None if p50 is None else p50 / 1e6, "p95_ms": None if p95 is None else p95 / 1e6}


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``raw``: round bin edges."""
    if raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if factor * power >= raw:
            return factor * power
    return 10.0 * power


class TaskStats:
    """One task's figures: its repeats are one group (a GRPO group)."""

    __slots__ = (
        "agent",
        "dispatches",
        "duration_total",
        "durations",
        "error_types",
        "example_trace_id",
        "label",
        "masked",
        "reward_m2",
        "reward_max",
        "reward_mean",
        "reward_min",
        "rewarded",
        "successes",
        "task_id",
        "task_index",
        "taskset",
        "unhealthy",
        "unscored",
        "values",
        "values_other",
    )

    def __init__(self, label: str, task_id: str | None, task_index: int | None, taskset: str | None = None) -> None:
        self.label = label
        self.task_id = task_id
        self.task_index = task_index
        self.taskset = taskset
        self.agent: str | None = None
        self.dispatches = 0
        self.error_types: Counter[str] | None = None
        self.rewarded = 0
        self.masked = 0
        self.unscored = 0  # verified, but no numeric reward
        self.reward_mean = 0.0
        self.reward_m2 = 0.0
        self.reward_min: float | None = None
        self.reward_max: float | None = None
        self.successes = 0
        self.values: Counter[float] = Counter()
        self.values_other = 0
        self.unhealthy = 0
        self.durations = 0
        self.duration_total = 0
        self.example_trace_id: str | None = None

    @property
    def errors(self) -> int:
        return sum(self.error_types.values()) if self.error_types else 0

    def add_reward(self, reward: float, success: bool) -> None:
        self.rewarded += 1
        delta = reward - self.reward_mean
        self.reward_mean += delta / self.rewarded
        self.reward_m2 += delta * (reward - self.reward_mean)
        self.reward_min = reward if self.reward_min is None else min(self.reward_min, reward)
        self.reward_max = reward if self.reward_max is None else max(self.reward_max, reward)
        self.successes += success
        value = round(reward, 2)
        if value in self.values or len(self.values) < REWARD_VALUES:
            self.values[value] += 1
        else:
            self.values_other += 1

    @property
    def reward_std(self) -> float | None:
        """Population standard deviation of the rewards (the spread a GRPO group normalises by)."""
        return math.sqrt(self.reward_m2 / self.rewarded) if self.rewarded else None

    @property
    def zero_variance(self) -> bool:
        """Two or more rewards, all equal: the group's advantages are all zero, it teaches nothing."""
        return self.rewarded >= 2 and self.reward_min == self.reward_max


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples with ``c`` successes (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def ks_for(n: int) -> list[int]:
    """The k of pass@k reported for ``n`` samples: powers of two below ``n``, and ``n``."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n] if n >= 1 else []


class RunFigures:
    """Feed it spans (:meth:`add`), then read :meth:`figures`."""

    def __init__(
        self,
        success_threshold: float = 1.0,
        trace_url: str | None = None,
        join_capacity: int = JOIN_CAPACITY,
        rollout_rows: int = ROLLOUT_ROWS,
        memo_capacity: int = MEMO_CAPACITY,
        max_infra_failures: float = INFRA_LIMIT,
    ) -> None:
        self.success_threshold = success_threshold
        self.infra = InfraFailures(max_infra_failures)
        self.tokens = TokenFigures()
        self.task_durations = TaskDurations()
        self.rollout_rows = rollout_rows
        self.memo = RolloutMemo(memo_capacity)
        self.rows: dict[int, dict[str, Any]] = {}
        self.chains: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self.retried_dispatches = 0
        self.rewarded_unhealthy: list[dict[str, Any]] = []
        self.trace_url = trace_url
        self.join_capacity = join_capacity
        self.tasks: dict[tuple[str, Any], TaskStats] = {}
        self.task_of_index: dict[int, TaskStats] = {}
        self.orphan_verifies = TaskStats("(verify without a dispatch)", None, None)
        self.dispatches = 0
        self.verifies = 0
        self.error_types: Counter[str] = Counter()
        self.failed: list[dict[str, Any]] = []
        self.verdicts: Counter[str] = Counter()
        self.checks: Counter[str] = Counter()
        self.unhealthy: list[dict[str, Any]] = []
        self.health_spans = 0
        self.durations = DurationSketch()
        self.without_duration = 0
        self.slowest: list[tuple[int, int, dict[str, Any]]] = []
        self.replayed_spans = 0
        self.services: Counter[str] = Counter()
        self.first_start: int | None = None
        self.last_end: int | None = None
        self._pending: OrderedDict[str, list[tuple[str, str | None, Any]]] = OrderedDict()
        self._pending_size = 0
        self.dropped_dispatch_joins = 0
        self._sequence = 0

    # -- reading ------------------------------------------------------------------------------

    def add_all(self, spans: Iterable[Span]) -> RunFigures:
        for span in spans:
            self.add(span)
        return self

    def add(self, span: Span) -> None:
        attributes = span.attributes
        if attributes.get(REPLAYED) is True or span.resource.get(REPLAYED) is True:
            self.replayed_spans += 1
        service = span.resource.get("service.name")
        if type(service) is str and (service in self.services or len(self.services) < 32):
            self.services[service] += 1
        if span.name == semconv.SPAN_DISPATCH:
            self._dispatch(span, attributes)
        elif span.name == semconv.SPAN_VERIFY:
            self._verify(span, attributes)
        elif GEN_AI_OPERATION in attributes:
            rollout_id = attributes.get(semconv.ROLLOUT_ID)
            key = rollout_key(span.trace_id, rollout_id if type(rollout_id) is str else None)
            self.tokens.model_call(span, key, self.trace_url)
        else:
            self._health(span, attributes)

    def _task(self, attributes: dict[str, Any]) -> TaskStats:
        task_id = attributes.get(semconv.TASK_ID)
        task_index = attributes.get(semconv.TASK_INDEX)
        task_id = task_id if type(task_id) is str else None
        task_index = task_index if type(task_index) is int else None
        key: tuple[str, Any] = ("id", task_id) if task_id is not None else ("index", task_index)
        task = self.tasks.get(key)
        if task is None:
            taskset = None
            if task_id is not None:
                label, taskset = readable_task(task_id)
            else:
                label = f"#{task_index}" if task_index is not None else NO_TASK
            task = self.tasks[key] = TaskStats(label, task_id, task_index, taskset)
        if task_index is not None and task_index not in self.task_of_index:
            self.task_of_index[task_index] = task
        agent = attributes.get(semconv.AGENT_NAME)
        agent = agent if type(agent) is str else NO_AGENT
        if task.agent is None:
            task.agent = agent
        elif task.agent != agent:
            task.agent = SEVERAL
        return task

    def _rollout(self, span: Span, attributes: dict[str, Any], task: TaskStats | None) -> dict[str, Any]:
        rollout: dict[str, Any] = {
            "task": task.label if task is not None else None,
            "rollout_id": attributes.get(semconv.ROLLOUT_ID),
            "trace_id": span.trace_id,
            "span_id": span.span_id,
        }
        if self.trace_url:
            rollout["trace_url"] = trace_link(self.trace_url, span.trace_id, span.span_id)
        return rollout

    def _dispatch(self, span: Span, attributes: dict[str, Any]) -> None:
        self.dispatches += 1
        task = self._task(attributes)
        task.dispatches += 1
        rollout_id = attributes.get(semconv.ROLLOUT_ID)
        rollout_id = rollout_id if type(rollout_id) is str else None
        key = rollout_key(span.trace_id, rollout_id)
        if task.example_trace_id is None:
            task.example_trace_id = span.trace_id
        if self.first_start is None or 0 < span.start_ns < self.first_start:
            self.first_start = span.start_ns
        if self.last_end is None or span.end_ns > self.last_end:
            self.last_end = span.end_ns
        error_type = attributes.get(semconv.ERROR_TYPE)
        if error_type is not None or span.status_code == STATUS_ERROR:
            error_name = str(error_type) if error_type is not None else "(error without error.type)"
            self.error_types[error_name] += 1
            if task.error_types is None:
                task.error_types = Counter()
            task.error_types[error_name] += 1
            if len(self.failed) < LISTED:
                self.failed.append({**self._rollout(span, attributes, task), "error_type": error_name})
        else:
            error_name = None
            self.memo.add(key)
        self.infra.dispatched(task.label, error_name)
        self.tokens.dispatch(attributes, key, task.label)
        self._attempt(span, attributes, task, rollout_id, error_name, key)
        duration: int | None = None
        if attributes.get(REPLAY_TIMING) == TIMING_PLACEHOLDER or span.end_ns < span.start_ns or not span.start_ns:
            self.without_duration += 1
        else:
            duration = span.end_ns - span.start_ns
            self.durations.add(duration)
            task.durations += 1
            task.duration_total += duration
            self.task_durations.add(task.label, duration)
            self._sequence += 1
            if len(self.slowest) < SLOWEST or duration > self.slowest[0][0]:
                entry = (duration, self._sequence, {**self._rollout(span, attributes, task), "duration_ms": duration / 1e6})
                if len(self.slowest) < SLOWEST:
                    heapq.heappush(self.slowest, entry)
                else:
                    heapq.heapreplace(self.slowest, entry)
        if len(self.rows) < self.rollout_rows and key not in self.rows:
            repeat = attributes.get(semconv.ROLLOUT_REPEAT)
            self.rows[key] = {
                **self._rollout(span, attributes, task),
                "task_index": task.task_index,
                "repeat": repeat if type(repeat) is int else None,
                "agent": attributes.get(semconv.AGENT_NAME) if type(attributes.get(semconv.AGENT_NAME)) is str else None,
                "error_type": error_name,
                "duration_ms": None if duration is None else duration / 1e6,
            }
        self._meet(span, attributes, "dispatch", (task, key))

    def _attempt(
        self, span: Span, attributes: dict[str, Any], task: TaskStats, rollout_id: str | None, error: str | None, key: int
    ) -> None:
        """Follow a (task index, repeat) that failed or was retried: its attempts, in order, are one chain."""
        task_index, repeat, attempt = attributes.get(semconv.TASK_INDEX), attributes.get(semconv.ROLLOUT_REPEAT), None
        attempt_value = attributes.get(semconv.ROLLOUT_ATTEMPT)
        if type(attempt_value) is int:
            attempt = attempt_value
        # The id's index form ("3-1-a2") only where an attribute is missing: most dispatches carry all three.
        needed = type(task_index) is not int or type(repeat) is not int or (attempt is None and "-a" in (rollout_id or ""))
        if needed and rollout_id is not None and (parsed := parse_index_form(rollout_id)) is not None:
            task_index = task_index if type(task_index) is int else parsed[0]
            repeat = repeat if type(repeat) is int else parsed[1]
            attempt = attempt if attempt is not None else (parsed[2] or 0)
        attempt = attempt or 0
        if attempt > 0:
            self.retried_dispatches += 1
        if type(task_index) is not int or type(repeat) is not int:
            return
        pair = (task_index, repeat)
        chain = self.chains.get(pair)
        if chain is None:
            if (error is None and attempt == 0) or len(self.chains) >= CHAINS:
                return
            chain = self.chains[pair] = []
        chain.append(
            {
                "rollout_id": rollout_id,
                "attempt": attempt,
                "error_type": error,
                "task": task.label,
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "key": key,
            }
        )

    def _verify(self, span: Span, attributes: dict[str, Any]) -> None:
        self.verifies += 1
        reward = attributes.get(semconv.ROLLOUT_REWARD)
        rule = attributes.get(semconv.REWARD_RULE)
        result = (
            float(cast(float, reward)) if type(reward) in (int, float) and math.isfinite(cast(float, reward)) else None,
            attributes.get(semconv.VERIFY_MASKED) is True,
            rule if rule in semconv.REWARD_RULES else "last",
            span.start_ns,
            kind if type(kind := attributes.get(semconv.FAILURE_KIND)) is str else None,
        )
        self._meet(span, attributes, "verify", result)

    def _meet(self, span: Span, attributes: dict[str, Any], kind: str, payload: Any) -> None:
        """Join a dispatch and its verifies (a multi-step rollout has several): a dispatch takes every
        verify of its rollout read before it and is scored once; a dispatch read before any of its
        verifies is held, its verifies join it, and it is scored when the run is read (:meth:`finish`)."""
        rollout_id = attributes.get(semconv.ROLLOUT_ID)
        rollout_id = rollout_id if type(rollout_id) is str else None
        if kind == "verify":
            dispatch = self._take(span.trace_id, "dispatch", rollout_id, keep=True)
            if dispatch is None:
                self._hold(span.trace_id, kind, rollout_id, payload)
            else:
                dispatch[3].append(payload)
            return
        task, key = payload
        failed = attributes.get(semconv.ERROR_TYPE) is not None or span.status_code == STATUS_ERROR
        dispatch = [task, key, failed, []]
        verifies = dispatch[3]
        while (verify := self._take(span.trace_id, "verify", rollout_id)) is not None:
            verifies.append(verify)
            if rollout_id is None:
                break  # (a verify without a rollout id: one per dispatch, as it can name no other)
        if verifies:  # its verifies ended before it did, in its own process: all of them are read
            self._score(dispatch)
        else:  # held: its verifies are in a file read later (another process), and join it there
            self._hold(span.trace_id, kind, rollout_id, dispatch)

    def _score(self, dispatch: list[Any]) -> None:
        """Score a rollout once, by its verifies' reward rule (the last one's rule: ``last``, ``sum``,
        ``max`` or ``first``, in the order they started); a failed rollout's verifies are not counted
        (its dispatch already counted it as an infrastructure failure)."""
        task, key, failed, verifies = dispatch
        if not verifies or failed:
            return
        verifies.sort(key=lambda verify: verify[3])
        rule = verifies[-1][2]
        if rule in ("last", "first"):
            reward, masked = verifies[-1 if rule == "last" else 0][:2]
        else:
            rewards = [verify[0] for verify in verifies if verify[0] is not None]
            reward = (sum(rewards) if rule == "sum" else max(rewards)) if rewards else None
            masked = reward is None and any(verify[1] for verify in verifies)
        failure_kind = next((verify[4] for verify in reversed(verifies) if verify[4] is not None), None)
        if key is not None:
            self.infra.verified(task.label, reward, masked, failure_kind)
        if reward is not None:
            task.add_reward(reward, reward >= self.success_threshold)
        elif masked:
            task.masked += 1
        else:
            task.unscored += 1
        if key is not None:
            self.memo.set_reward(key, reward if reward is not None else (math.inf if masked else -math.inf))

    def _take(self, trace_id: str, kind: str, rollout_id: str | None, keep: bool = False) -> Any:
        entries = self._pending.get(trace_id)
        if not entries:
            return None
        for position, (entry_kind, entry_rollout_id, payload) in enumerate(entries):
            if entry_kind == kind and (entry_rollout_id == rollout_id or entry_rollout_id is None or rollout_id is None):
                if keep:
                    return payload
                del entries[position]
                self._pending_size -= 1
                if not entries:
                    del self._pending[trace_id]
                return payload
        return None

    def _hold(self, trace_id: str, kind: str, rollout_id: str | None, payload: Any) -> None:
        entries = self._pending.get(trace_id)
        if entries is None:
            entries = self._pending[trace_id] = []
        entries.append((kind, rollout_id, payload))
        self._pending_size += 1
        while self._pending_size > self.join_capacity:
            _, dropped = self._pending.popitem(last=False)
            self._pending_size -= len(dropped)
            self._settle(dropped)

    def _settle(self, entries: list[tuple[str, str | None, Any]]) -> None:
        for kind, _, payload in entries:
            if kind == "verify":
                self._score([self.orphan_verifies, None, False, [payload]])
            elif payload[3]:
                self._score(payload)
            else:
                self.dropped_dispatch_joins += 1

    def _health(self, span: Span, attributes: dict[str, Any]) -> None:
        self.health_spans += 1
        verdict = attributes.get(semconv.HEALTH_VERDICT)
        verdict = verdict if type(verdict) is str else "(none)"
        checks = attributes.get(semconv.HEALTH_CHECKS)
        checks = sorted({check for check in checks if type(check) is str}) if type(checks) is list else []
        self.verdicts[verdict] += 1
        self.checks.update(checks)
        rollout_id = attributes.get(semconv.ROLLOUT_ID)
        rollout_id = rollout_id if type(rollout_id) is str else None
        key = rollout_key(span.trace_id, rollout_id)
        self.memo.set_verdict(key, VERDICT_CODES.get(verdict, 4))
        row = self.rows.get(key)
        if row is not None:
            row["checks"] = checks
        if verdict == "unhealthy":
            task = None
            if rollout_id is not None:
                parsed = parse_index_form(rollout_id)
                if parsed is not None:
                    task = self.task_of_index.get(parsed[0])
            if task is not None:
                task.unhealthy += 1
            entry = {**self._rollout(span, attributes, task), "checks": checks, "key": key}
            if len(self.unhealthy) < LISTED:
                self.unhealthy.append(entry)
            known = self.memo.get(key)
            if (
                known is not None
                and reward_class(known[0], self.success_threshold) == "success"
                and len(self.rewarded_unhealthy) < LISTED
            ):
                self.rewarded_unhealthy.append(entry)

    # -- figures ------------------------------------------------------------------------------

    def finish(self) -> None:
        """Score every rollout read, and settle a verify whose dispatch never came."""
        while self._pending:
            _, entries = self._pending.popitem(last=False)
            for kind, _, payload in entries:
                if kind == "verify":
                    self._score([self.orphan_verifies, None, False, [payload]])
                else:
                    self._score(payload)
        self._pending_size = 0

    def task_figures(self, task: TaskStats) -> dict[str, Any]:
        errors = task.errors
        rollouts = task.dispatches - errors
        figures: dict[str, Any] = {
            "task": task.label,
            "task_id": task.task_id,
            "task_index": task.task_index,
            "dispatches": task.dispatches,
            "rollouts": rollouts,
            "errors": dict(task.error_types.most_common()) if task.error_types else {},
            "rewarded": task.rewarded,
            "masked": task.masked,
            "unscored": task.unscored,
            "unverified": max(0, rollouts - task.rewarded - task.masked - task.unscored),
            "mean_reward": task.reward_mean if task.rewarded else None,
            "reward_std": task.reward_std,
            "min_reward": task.reward_min,
            "max_reward": task.reward_max,
            "successes": task.successes,
            "success_rate": task.successes / task.rewarded if task.rewarded else None,
            "pass_at_k": {str(k): pass_at_k(task.rewarded, task.successes, k) for k in ks_for(task.rewarded)},
            "zero_variance": task.zero_variance,
            "unhealthy": task.unhealthy,
            "unhealthy_rate": task.unhealthy / rollouts if rollouts else None,
            "taskset": task.taskset,
            "agent": task.agent,
            "mean_duration_ms": task.duration_total / task.durations / 1e6 if task.durations else None,
            "reward_values": {repr(value): count for value, count in sorted(task.values.items())},
            "example_trace_id": task.example_trace_id,
        }
        if task.values_other:
            figures["reward_values_other"] = task.values_other
        if self.trace_url and task.example_trace_id:
            figures["example_trace_url"] = trace_link(self.trace_url, task.example_trace_id, "")
        return figures

    def figures(self, stats: ReadStats | None = None) -> dict[str, Any]:
        """Every figure of the report, as plain JSON-ready values."""
        self.finish()
        tasks = sorted(
            self.tasks.values(),
            key=lambda task: (task.task_index is None, task.task_index if task.task_index is not None else 0, task.label),
        )
        task_figures = [self.task_figures(task) for task in tasks]
        rewarded = sum(task.rewarded for task in tasks)
        successes = sum(task.successes for task in tasks)
        reward_total = sum(task.reward_mean * task.rewarded for task in tasks)
        mean = reward_total / rewarded if rewarded else None
        # The run's spread from the tasks' own (parallel algorithm of Chan et al.).
        m2 = sum(task.reward_m2 + task.rewarded * (task.reward_mean - mean) ** 2 for task in tasks) if mean is not None else 0.0
        groups = [task for task in tasks if task.rewarded >= 2]
        flat = [task for task in groups if task.zero_variance]
        largest = max((task.rewarded for task in tasks), default=0)
        run_pass: dict[str, dict[str, Any]] = {}
        for k in sorted(set(ks_for(largest)) | {task.rewarded for task in tasks if task.rewarded}):
            eligible = [task for task in tasks if task.rewarded >= k]
            if eligible:
                run_pass[str(k)] = {
                    "value": sum(pass_at_k(task.rewarded, task.successes, k) for task in eligible) / len(eligible),
                    "tasks": len(eligible),
                }
        errors = sum(self.error_types.values())
        orphans = self.orphan_verifies
        durations = self.durations

        def quantile(q: float) -> float | None:
            value = durations.quantile(q)
            return None if value is None else value / 1e6

        figures: dict[str, Any] = {
            "source": {
                "files": stats.files_read if stats else [],
                "lines": stats.lines if stats else None,
                "bytes": stats.bytes if stats else None,
                "spans": stats.spans if stats else self.dispatches + self.verifies + self.health_spans,
                "other_spans": stats.other_spans if stats else None,
                "skipped_lines": (stats.bad_lines + stats.other_signal_lines) if stats else None,
                "unreadable_lines": stats.bad_lines if stats else None,  # not OTLP/JSON at all
                "replayed_spans": self.replayed_spans,
                "services": sorted(self.services),
                "first_start_unix_nano": self.first_start,
                "last_end_unix_nano": self.last_end,
                "wall_ms": (self.last_end - self.first_start) / 1e6 if self.first_start and self.last_end else None,
            },
            "run": {
                "tasks": len(tasks),
                "dispatches": self.dispatches,
                "rollouts": self.dispatches - errors,
                "errors": errors,
                "verifies": self.verifies,
                "rewarded": rewarded,
                "masked": sum(task.masked for task in tasks),
                "unscored": sum(task.unscored for task in tasks),
                "mean_reward": mean,
                "reward_std": math.sqrt(m2 / rewarded) if rewarded else None,
                "success_threshold": self.success_threshold,
                "successes": successes,
                "success_rate": successes / rewarded if rewarded else None,
                "pass_at_k": run_pass,
                "groups": len(groups),
                "zero_variance_groups": len(flat),
                "zero_variance_tasks": [
                    {"task": task.label, "reward": task.reward_min, "rollouts": task.rewarded} for task in flat[:LISTED]
                ],
                "verifies_without_dispatch": orphans.rewarded + orphans.masked + orphans.unscored,
                "verifies_without_dispatch_rewarded": orphans.rewarded,
            },
            "tasks": task_figures,
            "errors": {"by_type": dict(self.error_types.most_common()), "rollouts": self.failed, "listed": len(self.failed)},
            "health": {
                "spans": self.health_spans,
                "verdicts": dict(self.verdicts.most_common()),
                "checks": [{"check": check, "rollouts": count} for check, count in self.checks.most_common()],
                "unhealthy": self.unhealthy,
                "unhealthy_total": self.verdicts.get("unhealthy", 0),
            },
            "time": {
                "measured": durations.count,
                "without_duration": self.without_duration,
                "p50_ms": quantile(0.50),
                "p95_ms": quantile(0.95),
                "max_ms": durations.max / 1e6 if durations.max is not None else None,
                "mean_ms": durations.total / durations.count / 1e6 if durations.count else None,
                "slowest": [entry for _, _, entry in sorted(self.slowest, reverse=True)],
                "histogram": durations.histogram(),
            },
            "trace_url": self.trace_url,
            "rewards": self._reward_distribution(task_figures, errors),
            "reward_health": self._reward_health(),
            "groups": {
                "agent": group_figures(task_figures, "agent"),
                "taskset": group_figures(task_figures, "taskset") if any(task.taskset for task in tasks) else [],
            },
            "retries": self._retries(),
            "rollouts": self._rollout_rows(),
        }
        figures["time"]["linear_histogram"] = durations.linear_histogram()
        figures["infra_failures"] = infra = self.infra.figures(self._replaced_attempts())
        figures["tokens"] = tokens = self.tokens.figures(self.memo.get, self.success_threshold)
        for task_figure in task_figures:
            task_figure["infra_failures"] = infra["tasks"].get(task_figure["task"])
            task_figure["tokens"] = tokens["tasks"].get(task_figure["task"])
            task_figure.update(self.task_durations.figures(task_figure["task"]))
        figures["health"]["unhealthy"] = [
            self._fill({key: value for key, value in item.items() if key != "key"}, item["key"]) for item in self.unhealthy
        ]
        return figures

    def _fill(self, rollout: dict[str, Any], key: int) -> dict[str, Any]:
        """A listed rollout's reward and verdict, as the memo has them at the end of the read."""
        known = self.memo.get(key)
        reward, verdict = known if known is not None else (math.nan, 0)
        rollout["reward"] = reward_value(reward)
        rollout["verdict"] = VERDICT_NAMES[verdict] if verdict else None
        return rollout

    def _reward_distribution(self, tasks: list[dict[str, Any]], errors: int) -> dict[str, Any]:
        """Every rollout once: its reward value (rounded to 0.01), or masked, unscored, not verified, failed."""
        values: Counter[float] = Counter()
        for task in self.tasks.values():
            values.update(task.values)
        other = sum(task.values_other for task in self.tasks.values())
        distribution: dict[str, Any] = {
            "over": "rollouts",
            "values": {repr(value): count for value, count in sorted(values.items())},
            "values_other": other,
            "masked": sum(task["masked"] for task in tasks),
            "unscored": sum(task["unscored"] for task in tasks),
            "unverified": sum(task["unverified"] for task in tasks),
            "failed": errors,
            "binary": set(values) <= {0.0, 1.0},
            "bins": [],
        }
        if len(values) > DISCRETE_VALUES:
            low, high = min(values), max(values)
            width = (high - low) / REWARD_BINS or 1.0
            counts = [0] * REWARD_BINS
            for value, count in values.items():
                counts[min(REWARD_BINS - 1, int((value - low) / width))] += count
            distribution["bins"] = [
                {"from": low + index * width, "to": low + (index + 1) * width, "count": count}
                for index, count in enumerate(counts)
            ]
        return distribution

    def _reward_health(self) -> dict[str, Any]:
        crossed = self.memo.crossed(self.success_threshold)
        listed_keys = {id(entry) for entry in self.rewarded_unhealthy}
        rewarded_unhealthy = []
        for entry in self.rewarded_unhealthy:
            rewarded_unhealthy.append(self._fill({k: v for k, v in entry.items() if k != "key"}, entry["key"]))
        for entry in self.unhealthy:  # a verify read after its verdict: known only now
            if id(entry) in listed_keys or "key" not in entry or len(rewarded_unhealthy) >= LISTED:
                continue
            known = self.memo.get(entry["key"])
            if known is not None and reward_class(known[0], self.success_threshold) == "success":
                rewarded_unhealthy.append(self._fill({k: v for k, v in entry.items() if k != "key"}, entry["key"]))
        return {
            "over": "rollouts with a verdict or a verify (failed dispatches left out)",
            "classes": list(REWARD_CLASSES),
            "counts": crossed,
            "rewarded_unhealthy_total": crossed.get("success", {}).get("unhealthy", 0),
            "rewarded_unhealthy": rewarded_unhealthy,
            "not_crossed": self.memo.full,
        }

    def _replaced_attempts(self) -> list[tuple[str, str]]:
        """(task, error type) of each failed attempt that a later attempt of its (task index, repeat) replaced."""
        replaced = []
        for attempts in self.chains.values():
            ordered = sorted(attempts, key=lambda attempt: attempt["attempt"])
            replaced += [(step["task"], step["error_type"]) for step in ordered[:-1] if step["error_type"] is not None]
        return replaced

    def _retries(self) -> dict[str, Any]:
        chains: list[dict[str, Any]] = []
        recovered = still_failed = 0
        for (task_index, repeat), attempts in self.chains.items():
            ordered = sorted(attempts, key=lambda attempt: attempt["attempt"])
            last = ordered[-1]
            outcome = "failed" if last["error_type"] is not None else "recovered"
            if len(ordered) < 2 and outcome == "recovered":
                continue  # a retry whose failed attempt is not in the files read
            recovered += outcome == "recovered"
            still_failed += outcome == "failed"
            if len(chains) < LISTED:
                listed = []
                for attempt in ordered:
                    entry = {key: value for key, value in attempt.items() if key != "key"}
                    if attempt["error_type"] is None:
                        self._fill(entry, attempt["key"])
                    if self.trace_url:
                        entry["trace_url"] = trace_link(self.trace_url, attempt["trace_id"], attempt["span_id"])
                    listed.append(entry)
                chains.append(
                    {"task": last["task"], "task_index": task_index, "repeat": repeat, "outcome": outcome, "attempts": listed}
                )
        return {
            "retried_dispatches": self.retried_dispatches,
            "recovered": recovered,
            "still_failed": still_failed,
            "chains": chains,
            "followed_limit": CHAINS,
        }

    def _rollout_rows(self) -> dict[str, Any]:
        retry_of: dict[str, str] = {}
        retried_by: dict[str, str] = {}
        for attempts in self.chains.values():
            ordered = sorted(attempts, key=lambda attempt: attempt["attempt"])
            for earlier, later in itertools.pairwise(ordered):
                if earlier["rollout_id"] and later["rollout_id"]:
                    retry_of[later["rollout_id"]] = earlier["rollout_id"]
                    retried_by[earlier["rollout_id"]] = later["rollout_id"]
        rows = []
        for key, row in self.rows.items():
            entry = self._fill(dict(row), key)
            entry.setdefault("checks", [])
            if row["error_type"] is not None:
                entry["reward"], entry["verdict"] = None, None
            rollout_id = row["rollout_id"]
            if rollout_id in retry_of:
                entry["retry_of"] = retry_of[rollout_id]
            if rollout_id in retried_by:
                entry["retried_by"] = retried_by[rollout_id]
            rows.append(entry)
        return {"total": self.dispatches, "listed": len(rows), "rows": rows}


def group_figures(tasks: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """The tasks' figures summed per agent (or taskset): a task counts once, under the name it ran with."""
    groups: dict[str, dict[str, Any]] = {}
    for task in tasks:
        name = task[field] or (NO_AGENT if field == "agent" else "(no taskset)")
        group = groups.get(name)
        if group is None:
            group = groups[name] = {
                "name": name,
                "tasks": 0,
                "dispatches": 0,
                "failed": 0,
                "rollouts": 0,
                "rewarded": 0,
                "reward_total": 0.0,
                "successes": 0,
                "rates": [],
                "unhealthy": 0,
            }
        group["tasks"] += 1
        group["dispatches"] += task["dispatches"]
        group["failed"] += sum(task["errors"].values())
        group["rollouts"] += task["rollouts"]
        group["rewarded"] += task["rewarded"]
        group["reward_total"] += (task["mean_reward"] or 0.0) * task["rewarded"]
        group["successes"] += task["successes"]
        if task["success_rate"] is not None:
            group["rates"].append(task["success_rate"])
        group["unhealthy"] += task["unhealthy"]
    figures = []
    for group in sorted(groups.values(), key=lambda group: (-group["dispatches"], group["name"])):
        rates = group.pop("rates")
        total = group.pop("reward_total")
        group["mean_reward"] = total / group["rewarded"] if group["rewarded"] else None
        group["success_rate"] = group["successes"] / group["rewarded"] if group["rewarded"] else None
        group["pass_at_1"] = sum(rates) / len(rates) if rates else None
        group["unhealthy_rate"] = group["unhealthy"] / group["rollouts"] if group["rollouts"] else None
        figures.append(group)
    return figures


# -- trace links -------------------------------------------------------------------------------

TRACE_URL_PRESETS = {
    # Arize Phoenix resolves an OpenTelemetry trace id itself (any project).
    "phoenix": "http://127.0.0.1:6006/redirects/traces/{trace_id}",
    # An MLflow tracking server that received the spans over OTLP names the trace "tr-<trace id>";
    # experiment 0 is its Default experiment (the one an OTLP export without x-mlflow-experiment-id header lands in).
    "mlflow": "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}",
}


def trace_url_template(value: str | None) -> str | None:
    """A ``--trace-url`` value: a preset name (``phoenix``, ``mlflow``) or a template with ``{trace_id}``."""
    if not value:
        return None
    template = TRACE_URL_PRESETS.get(value, value)
    try:
        template.format(trace_id="0" * 32, span_id="0" * 16)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"--trace-url: a template may use {{trace_id}} and {{span_id}} only ({error!r})") from None
    if "{trace_id}" not in template:
        raise ValueError(f"--trace-url: the template has no {{trace_id}}: {template!r}")
    return template


def trace_link(template: str, trace_id: str, span_id: str) -> str:
    return template.format(trace_id=trace_id, span_id=span_id)
