"""The figures of a run: every span read first, then joined into rollouts, then each rollout decided once.

Reading (:meth:`RunFigures.add`) keeps what a span says on its own (per task: dispatches, their
error types and durations; per run: services, times, the slowest dispatches, the model calls) and
puts what needs the join into the rollout store (:mod:`gym_instrument.tools.report.rollouts`):
dispatch, verifies, verdict and tokens of each rollout, by trace id and rollout id. The figures
(:meth:`RunFigures.figures`) join the store, mark the failed attempts a retry replaced, then decide
each rollout once and count it once, in its task and in the run.

**A rollout** is a dispatch of one trace id and rollout id, except a failed attempt that a later
attempt of its task and repeat replaced. Every table and line counts rollouts so, and each rollout
has exactly one outcome (``OUTCOMES``):

- ``success`` / ``below threshold``: scored, a numeric reward (at or over ``--success-threshold``,
  or under it; ``scored_zero``: a reward of exactly 0);
- ``masked``, ``failure kind``, ``failed dispatch``: the infrastructure failures (its verifies'
  decision was masked or named a failure kind, or its dispatch failed; see
  :func:`~gym_instrument.tools.report.rollouts.decide`);
- ``unscored``: verified, no numeric reward and nothing failed; ``no verify``: no verify read.

Per training step (``figures["steps"]``, only when some dispatch names a ``nemo.gym.train.step``):
each rollout once, under its dispatch's step, with its reward, outcome and tokens
(:mod:`gym_instrument.tools.report.steps`).

Mean reward and success rate are over scored rollouts; shares (infrastructure failures, masked,
failed, unhealthy) over rollouts. Verifies and verdicts whose dispatch was not read are counted
apart (``rollouts_without_dispatch``, ``health.without_rollout``), each rollout of them once.

Memory: the rollout store (about 70 bytes a rollout and 25 a verify), and per task a few counters,
a running mean and variance and at most 101 distinct reward values; fixed-size lists (the slowest,
the first failed and unhealthy rollouts, the first ``ROLLOUT_ROWS`` rollouts); log-bucket sketches
for durations and tokens; retries for up to ``CHAINS`` (task, repeat) pairs.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, cast

from gym_instrument import semconv
from gym_instrument.schema import parse_index_form
from gym_instrument.tools.report.links import TRACE_URL_PRESETS, trace_link, trace_url_template
from gym_instrument.tools.report.otlp import STATUS_ERROR, ReadStats, Span
from gym_instrument.tools.report.rollouts import (
    DISPATCHED,
    FAILED,
    MERGED,
    REPLACED,
    ROLLOUT_CAPACITY,
    RolloutStore,
    decide,
)
from gym_instrument.tools.report.sketch import DurationSketch, TaskDurations, ks_for, pass_at_k
from gym_instrument.tools.report.steps import StepFigures
from gym_instrument.tools.report.tokens import ModelCalls, TokenFigures, token_count

__all__ = ["TRACE_URL_PRESETS", "DurationSketch", "RunFigures", "pass_at_k", "trace_link", "trace_url_template"]

# Replay marks what it made (gym_instrument.tools.replay): the report says so, and leaves placeholder
# durations out of the time figures.
REPLAYED = "gym.replayed"
REPLAY_TIMING = "gym.replay.timing"
TIMING_PLACEHOLDER = "placeholder"

SLOWEST = 20
DISCRETE_VALUES = 6  # up to this many distinct rewards: a bar per value; more: a histogram
REWARD_BINS = 20
LISTED = 500  # unhealthy and failed rollouts listed by name (all are counted)
UNHEALTHY_KEPT = 20_000  # unhealthy verdicts whose names are kept, to list those the join finds among rollouts
REWARD_VALUES = 101  # distinct rounded reward values kept per task for the pictures
NO_TASK = "(no task id)"
ROLLOUT_ROWS = 2000  # dispatches kept one by one for the all-rollouts table (all are counted)
CHAINS = 20_000  # (task, repeat) pairs followed for retries
NO_AGENT = "(no agent name)"
SEVERAL = "(several)"
INFRA_LIMIT = 0.05  # the share of infrastructure failures a run may have before the report says so (and exits non-zero)
MASKED_KIND = "masked"
NO_ERROR_TYPE = "(error without error.type)"

# A rollout's outcome: exactly one each.
SUCCESS = "success"
BELOW = "below threshold"
UNSCORED = "unscored"
NO_VERIFY = "no verify"
MASKED = "masked"
FAILURE_KIND = "failure kind"
FAILED_DISPATCH = "failed dispatch"
OUTCOMES = (SUCCESS, BELOW, UNSCORED, NO_VERIFY, MASKED, FAILURE_KIND, FAILED_DISPATCH)
_OUTCOME_NUMBER = {outcome: number for number, outcome in enumerate(OUTCOMES)}
INFRA_OUTCOMES = frozenset((MASKED, FAILURE_KIND, FAILED_DISPATCH))
VERDICT_COLUMNS = ("healthy", "unhealthy", "unobserved", "other verdict", "no verdict")


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


def verdict_column(verdict: str | None) -> str:
    """A verdict as a column of reward against health."""
    if verdict is None:
        return "no verdict"
    return verdict if verdict in semconv.KNOWN_VERDICTS else "other verdict"


class Task:
    """What a task's dispatches say as they are read: its name, agent, dispatches, error types, durations."""

    __slots__ = (
        "agent",
        "dispatches",
        "duration_total",
        "durations",
        "error_types",
        "example_trace_id",
        "label",
        "number",
        "task_id",
        "task_index",
        "taskset",
    )

    def __init__(self, number: int, label: str, task_id: str | None, task_index: int | None, taskset: str | None) -> None:
        self.number = number
        self.label = label
        self.task_id = task_id
        self.task_index = task_index
        self.taskset = taskset
        self.agent: str | None = None
        self.dispatches = 0
        self.error_types: Counter[str] | None = None  # its dispatches' error types, once one failed
        self.durations = 0
        self.duration_total = 0
        self.example_trace_id: str | None = None


class RolloutCounts:
    """Rollouts counted once each by outcome, with their rewards' running mean and spread (a task's, or the run's)."""

    __slots__ = (
        "judged",
        "kinds",
        "outcomes",
        "reward_m2",
        "reward_max",
        "reward_mean",
        "reward_min",
        "rollouts",
        "scored",
        "scored_zero",
        "unhealthy",
        "values",
        "values_other",
    )

    def __init__(self) -> None:
        self.rollouts = 0
        self.outcomes = [0] * len(OUTCOMES)  # (a list, not a Counter: a run may have 100,000 tasks)
        self.kinds: Counter[str] | None = None  # infrastructure failures by kind, once there is one
        self.scored = 0
        self.scored_zero = 0
        self.reward_mean = 0.0
        self.reward_m2 = 0.0
        self.reward_min: float | None = None
        self.reward_max: float | None = None
        self.values: Counter[float] = Counter()
        self.values_other = 0
        self.judged = 0
        self.unhealthy = 0

    def add(self, outcome: str, reward: float | None, kind: str | None, verdict: str | None) -> None:
        self.rollouts += 1
        self.outcomes[_OUTCOME_NUMBER[outcome]] += 1
        if outcome in INFRA_OUTCOMES:
            if self.kinds is None:
                self.kinds = Counter()
            self.kinds[kind or outcome] += 1
        if reward is not None:
            self.scored += 1
            self.scored_zero += reward == 0.0
            delta = reward - self.reward_mean
            self.reward_mean += delta / self.scored
            self.reward_m2 += delta * (reward - self.reward_mean)
            self.reward_min = reward if self.reward_min is None else min(self.reward_min, reward)
            self.reward_max = reward if self.reward_max is None else max(self.reward_max, reward)
            value = round(reward, 2)
            if value in self.values or len(self.values) < REWARD_VALUES:
                self.values[value] += 1
            else:
                self.values_other += 1
        if verdict is not None:
            self.judged += 1
            self.unhealthy += verdict == "unhealthy"

    def of(self, outcome: str) -> int:
        """How many rollouts had this outcome."""
        return self.outcomes[_OUTCOME_NUMBER[outcome]]

    @property
    def successes(self) -> int:
        return self.of(SUCCESS)

    @property
    def failures(self) -> int:
        return sum(self.kinds.values()) if self.kinds else 0

    @property
    def mean(self) -> float | None:
        return self.reward_mean if self.scored else None

    @property
    def reward_std(self) -> float | None:
        """Population standard deviation of the rewards (the spread a GRPO group normalises by)."""
        return math.sqrt(self.reward_m2 / self.scored) if self.scored else None

    @property
    def zero_variance(self) -> bool:
        """Two or more rewards, all equal: the group's advantages are all zero, it teaches nothing."""
        return self.scored >= 2 and self.reward_min == self.reward_max

    def kinds_by_count(self) -> dict[str, int]:
        return _by_count(self.kinds) if self.kinds else {}


class Tally:
    """What the figures count once every rollout is decided: per task and for the run, apart from what has no rollout."""

    def __init__(self, tasks: int, replaced: int) -> None:
        self.replaced = replaced  # failed attempts a retry replaced
        self.run = RolloutCounts()
        self.tasks = [RolloutCounts() for _ in range(tasks)]
        self.without_dispatch = RolloutCounts()  # verified, their dispatch in no file read
        self.crossed: Counter[tuple[str, str]] = Counter()  # (outcome, verdict column)
        self.verdicts: Counter[str] = Counter()
        self.checks: Counter[str] = Counter()
        self.verdicts_without_rollout = 0
        self.tokens = TokenFigures()
        self.steps = StepFigures()


def _by_count(counts: Counter[str]) -> dict[str, int]:
    """Counts, the largest first (equal counts by name: the read order never shows)."""
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


class RunFigures:
    """Feed it spans (:meth:`add`), then read :meth:`figures`."""

    def __init__(
        self,
        success_threshold: float = 1.0,
        trace_url: str | None = None,
        rollout_rows: int = ROLLOUT_ROWS,
        capacity: int = ROLLOUT_CAPACITY,
        max_infra_failures: float = INFRA_LIMIT,
    ) -> None:
        self.success_threshold = success_threshold
        self.trace_url = trace_url
        self.rollout_rows = rollout_rows
        self.infra_limit = max_infra_failures
        self.store = RolloutStore(capacity)
        self.tasks: dict[tuple[str, Any], Task] = {}
        self.task_list: list[Task] = []
        self.model_calls = ModelCalls()
        self.task_durations = TaskDurations()
        self.durations = DurationSketch()
        self.without_duration = 0
        self.slowest: list[tuple[int, str, dict[str, Any]]] = []
        self.dispatches = 0
        self.verifies = 0
        self.health_spans = 0
        self.error_types: Counter[str] = Counter()
        self.failed: list[dict[str, Any]] = []  # the first failed dispatches read, by name
        self.unhealthy_seen: list[dict[str, Any]] = []  # the first unhealthy verdicts read, by name
        self.rows: dict[int, dict[str, Any]] = {}  # record -> the first dispatches read, by name
        self.chains: dict[tuple[int, int, int | None], list[dict[str, Any]]] = {}  # by (task, repeat, step)
        self.retried_dispatches = 0
        self.replayed_spans = 0
        self.services: Counter[str] = Counter()
        self.first_start: int | None = None
        self.last_end: int | None = None

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
        rollout_id = attributes.get(semconv.ROLLOUT_ID)
        rollout_id = rollout_id if type(rollout_id) is str else None
        if span.name == semconv.SPAN_DISPATCH:
            self._dispatch(span, attributes, rollout_id)
        elif span.name == semconv.SPAN_VERIFY:
            self._verify(span, attributes, rollout_id)
        elif semconv.GEN_AI_OPERATION in attributes:
            self._model_call(span, attributes, rollout_id)
        else:
            self._health(span, attributes, rollout_id)

    def _task(self, attributes: dict[str, Any]) -> Task:
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
            task = self.tasks[key] = Task(len(self.task_list), label, task_id, task_index, taskset)
            self.task_list.append(task)
        agent = attributes.get(semconv.AGENT_NAME)
        agent = agent if type(agent) is str else NO_AGENT
        if task.agent is None:
            task.agent = agent
        elif task.agent != agent:
            task.agent = SEVERAL
        return task

    def _named(self, span: Span, rollout_id: str | None, task: Task | None) -> dict[str, Any]:
        """A rollout as the lists name it: task, rollout id, trace and span (and its trace's link)."""
        rollout: dict[str, Any] = {
            "task": task.label if task is not None else None,
            "rollout_id": rollout_id,
            "trace_id": span.trace_id,
            "span_id": span.span_id,
        }
        if self.trace_url:
            rollout["trace_url"] = trace_link(self.trace_url, span.trace_id, span.span_id)
        return rollout

    def _dispatch(self, span: Span, attributes: dict[str, Any], rollout_id: str | None) -> None:
        self.dispatches += 1
        task = self._task(attributes)
        task.dispatches += 1
        if task.example_trace_id is None:
            task.example_trace_id = span.trace_id
        if self.first_start is None or 0 < span.start_ns < self.first_start:
            self.first_start = span.start_ns
        if self.last_end is None or span.end_ns > self.last_end:
            self.last_end = span.end_ns
        error_type = attributes.get(semconv.ERROR_TYPE)
        error_name = None
        if error_type is not None or span.status_code == STATUS_ERROR:
            error_name = str(error_type) if error_type is not None else NO_ERROR_TYPE
            self.error_types[error_name] += 1
            if task.error_types is None:
                task.error_types = Counter()
            task.error_types[error_name] += 1
            if len(self.failed) < LISTED:
                self.failed.append({**self._named(span, rollout_id, task), "error_type": error_name})
        duration: int | None = None
        if attributes.get(REPLAY_TIMING) == TIMING_PLACEHOLDER or span.end_ns < span.start_ns or not span.start_ns:
            self.without_duration += 1
        else:
            duration = span.end_ns - span.start_ns
            self.durations.add(duration)
            task.durations += 1
            task.duration_total += duration
            self.task_durations.add(task.label, duration)
            item = (duration, span.span_id)
            if len(self.slowest) < SLOWEST or item > self.slowest[0][:2]:
                entry = (duration, span.span_id, {**self._named(span, rollout_id, task), "duration_ms": duration / 1e6})
                if len(self.slowest) < SLOWEST:
                    heapq.heappush(self.slowest, entry)
                else:
                    heapq.heapreplace(self.slowest, entry)
        step = attributes.get(semconv.TRAIN_STEP)
        step = step if type(step) is int and step >= 0 else None
        policy = attributes.get(semconv.POLICY_VERSION)
        row = self.store.record(span.trace_id, rollout_id, span.span_id)
        self._attempt(span, attributes, task, rollout_id, error_name, row, step)
        if row < 0:
            return
        self.store.dispatched(row, task.number, error_name, span.start_ns, step, policy if type(policy) is str else None)
        tokens_in = token_count(attributes.get(semconv.GEN_AI_INPUT_TOKENS))
        tokens_out = token_count(attributes.get(semconv.GEN_AI_OUTPUT_TOKENS))
        if tokens_in is not None or tokens_out is not None:
            calls = token_count(attributes.get(semconv.ROLLOUT_MODEL_CALLS)) or 0
            self.store.add_tokens(row, tokens_in or 0, tokens_out or 0, calls, from_dispatch=True)
        if len(self.rows) < self.rollout_rows and row not in self.rows:
            repeat = attributes.get(semconv.ROLLOUT_REPEAT)
            agent = attributes.get(semconv.AGENT_NAME)
            self.rows[row] = {
                **self._named(span, rollout_id, task),
                "task_index": task.task_index,
                "repeat": repeat if type(repeat) is int else None,
                "agent": agent if type(agent) is str else None,
                "error_type": error_name,
                "duration_ms": None if duration is None else duration / 1e6,
            }
            if step is not None:
                self.rows[row]["step"] = step

    def _attempt(
        self,
        span: Span,
        attributes: dict[str, Any],
        task: Task,
        rollout_id: str | None,
        error: str | None,
        row: int,
        step: int | None,
    ) -> None:
        """Follow a (task, repeat) that failed or was retried: its attempts are one chain. In a run of
        training steps, each step's: a trainer numbers its tasks and repeats anew at every step."""
        repeat, attempt = attributes.get(semconv.ROLLOUT_REPEAT), attributes.get(semconv.ROLLOUT_ATTEMPT)
        attempt = attempt if type(attempt) is int else None
        repeat = repeat if type(repeat) is int else None
        # The id's index form ("3-1-a2") only where an attribute is missing: most dispatches carry them.
        if (repeat is None or attempt is None) and rollout_id is not None and (parsed := parse_index_form(rollout_id)):
            repeat = repeat if repeat is not None else parsed[1]
            attempt = attempt if attempt is not None else (parsed[2] or 0)
        attempt = attempt or 0
        if attempt > 0:
            self.retried_dispatches += 1
        if repeat is None:
            return
        pair = (task.number, repeat, step)
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
                "task_index": task.task_index,
                "repeat": repeat,
                "step": step,
                "trace_id": span.trace_id,
                "span_id": span.span_id,
                "start": span.start_ns,
                "row": row,
            }
        )

    def _verify(self, span: Span, attributes: dict[str, Any], rollout_id: str | None) -> None:
        self.verifies += 1
        row = self.store.record(span.trace_id, rollout_id, span.parent_span_id)
        if row < 0:
            return
        reward = attributes.get(semconv.ROLLOUT_REWARD)
        numeric = float(cast(float, reward)) if type(reward) in (int, float) and math.isfinite(cast(float, reward)) else None
        kind = attributes.get(semconv.FAILURE_KIND)
        rule = attributes.get(semconv.REWARD_RULE)
        self.store.verified(
            row,
            span.start_ns,
            numeric,
            attributes.get(semconv.VERIFY_MASKED) is True,
            kind if type(kind) is str else None,
            rule if type(rule) is str and rule in semconv.REWARD_RULES else "last",
        )

    def _health(self, span: Span, attributes: dict[str, Any], rollout_id: str | None) -> None:
        self.health_spans += 1
        verdict = attributes.get(semconv.HEALTH_VERDICT)
        verdict = verdict if type(verdict) is str else "(none)"
        checks = attributes.get(semconv.HEALTH_CHECKS)
        checks = tuple(sorted({check for check in checks if type(check) is str})) if type(checks) is list else ()
        row = self.store.record(span.trace_id, rollout_id, span.parent_span_id)
        if row < 0:
            return
        self.store.judged(row, verdict, checks, span.start_ns)
        if verdict == "unhealthy" and len(self.unhealthy_seen) < UNHEALTHY_KEPT:
            self.unhealthy_seen.append({**self._named(span, rollout_id, None), "row": row})

    def _model_call(self, span: Span, attributes: dict[str, Any], rollout_id: str | None) -> None:
        self.model_calls.add(span, self.trace_url)
        row = self.store.record(span.trace_id, rollout_id, span.parent_span_id)
        if row >= 0:
            tokens_in = token_count(attributes.get(semconv.GEN_AI_INPUT_TOKENS)) or 0
            tokens_out = token_count(attributes.get(semconv.GEN_AI_OUTPUT_TOKENS)) or 0
            self.store.add_tokens(row, tokens_in, tokens_out, 1, from_dispatch=False)

    # -- the join and the figures -------------------------------------------------------------

    def _mark_replaced(self) -> int:
        """Mark each failed attempt that a later attempt of its (task, repeat) replaced; how many."""
        flags = self.store.flags
        replaced = 0
        for chain in self.chains.values():
            last = max(step["attempt"] for step in chain)
            for step in chain:
                row = step["row"]
                if step["error_type"] is not None and step["attempt"] < last and row >= 0 and flags[row] & FAILED:
                    if not flags[row] & REPLACED:
                        flags[row] |= REPLACED
                    replaced += 1
        return replaced

    def outcome(self, row: int) -> tuple[str, float | None, str | None]:
        """A rollout's outcome, its reward (scored only) and its kind (infrastructure failures only)."""
        store = self.store
        if store.flags[row] & FAILED:
            return FAILED_DISPATCH, None, store.error_of(row)
        if store.verify_head[row] < 0:
            return NO_VERIFY, None, None
        decision = decide(store.verifies(row))
        if decision.failure_kind is not None:
            return FAILURE_KIND, None, decision.failure_kind
        if decision.masked:
            return MASKED, None, MASKED_KIND
        if decision.reward is None:
            return UNSCORED, None, None
        return (SUCCESS if decision.reward >= self.success_threshold else BELOW), decision.reward, None

    def _count_rollouts(self) -> Tally:
        """Join, mark the replaced attempts, then decide each rollout once and count it once, in its task and the run."""
        store = self.store
        store.join()
        tally = Tally(len(self.task_list), self._mark_replaced())
        flags = store.flags
        for row in range(store.size):
            flag = flags[row]
            if flag & MERGED:
                continue
            judged = store.verdict_of(row)
            used = store.tokens_of(row)
            if not flag & DISPATCHED or flag & REPLACED:
                tally.verdicts_without_rollout += judged is not None
                if not flag & DISPATCHED:
                    if store.verify_head[row] >= 0:
                        outcome, reward, kind = self.outcome(row)
                        tally.without_dispatch.add(outcome, reward, kind, None)
                    if used is not None:
                        tally.tokens.add_without_dispatch(used)
                continue
            verdict = None if judged is None else judged[0]
            outcome, reward, kind = self.outcome(row)
            task = self.task_list[store.task[row]]
            tally.tasks[task.number].add(outcome, reward, kind, verdict)
            tally.run.add(outcome, reward, kind, verdict)
            tally.crossed[(outcome, verdict_column(verdict))] += 1
            if judged is not None:
                tally.verdicts[judged[0]] += 1
                tally.checks.update(judged[1])
            if used is not None:
                tally.tokens.add(used, task.label, outcome_label(outcome, reward))
            if store.step is not None:
                step, policy = store.step_of(row)
                tokens = None if used is None else used[0] + used[1]
                tally.steps.add(step, policy, reward, outcome == SUCCESS, outcome in INFRA_OUTCOMES, tokens)
        return tally

    def figures(self, stats: ReadStats | None = None) -> dict[str, Any]:
        """Every figure of the report, as plain JSON-ready values."""
        store = self.store
        tally = self._count_rollouts()
        run, per_task, crossed = tally.run, tally.tasks, tally.crossed
        order = sorted(
            self.task_list,
            key=lambda task: (task.task_index is None, task.task_index if task.task_index is not None else 0, task.label),
        )
        task_figures = [self._task_figures(task, per_task[task.number]) for task in order]
        scored_tasks = [per_task[task.number] for task in order]
        groups = [counts for counts in scored_tasks if counts.scored >= 2]
        flat = [(task, counts) for task, counts in zip(order, scored_tasks, strict=True) if counts.zero_variance]
        largest = max((counts.scored for counts in scored_tasks), default=0)
        run_pass: dict[str, dict[str, Any]] = {}
        for k in sorted(set(ks_for(largest)) | {counts.scored for counts in scored_tasks if counts.scored}):
            eligible = [counts for counts in scored_tasks if counts.scored >= k]
            if eligible:
                run_pass[str(k)] = {
                    "value": sum(pass_at_k(counts.scored, counts.successes, k) for counts in eligible) / len(eligible),
                    "tasks": len(eligible),
                }
        durations = self.durations

        def quantile(q: float) -> float | None:
            value = durations.quantile(q)
            return None if value is None else value / 1e6

        infra = self._infra(run, task_figures, tally.replaced)
        figures: dict[str, Any] = {
            "source": {
                "files": stats.files_read if stats else [],
                "lines": stats.lines if stats else None,
                "bytes": stats.bytes if stats else None,
                "spans": stats.spans if stats else self.dispatches + self.verifies + self.health_spans + self.model_calls.spans,
                "other_spans": stats.other_spans if stats else None,
                "skipped_lines": (stats.bad_lines + stats.other_signal_lines) if stats else None,
                "unreadable_lines": stats.bad_lines if stats else None,  # not OTLP/JSON at all
                "replayed_spans": self.replayed_spans,
                "services": sorted(self.services),
                "first_start_unix_nano": self.first_start,
                "last_end_unix_nano": self.last_end,
                "wall_ms": (self.last_end - self.first_start) / 1e6 if self.first_start and self.last_end else None,
                "spans_not_kept": store.spans_not_kept,
                "verifies_not_kept": store.verifies_not_kept,
            },
            "run": {
                "tasks": len(order),
                "dispatches": self.dispatches,
                "rollouts": run.rollouts,
                "replaced_attempts": tally.replaced,
                "duplicate_dispatches": store.duplicate_dispatches,
                "errors": sum(self.error_types.values()),
                "failed": run.of(FAILED_DISPATCH),
                "verifies": self.verifies,
                "scored": run.scored,
                "successes": run.successes,
                "scored_zero": run.scored_zero,
                "scored_below": run.of(BELOW),
                "infra_failures": run.failures,
                "masked": run.of(MASKED),
                "failure_kinds": run.of(FAILURE_KIND),
                "unscored": run.of(UNSCORED),
                "unverified": run.of(NO_VERIFY),
                "judged": run.judged,
                "unhealthy": run.unhealthy,
                "mean_reward": run.mean,
                "reward_std": run.reward_std,
                "success_threshold": self.success_threshold,
                "success_rate": run.successes / run.scored if run.scored else None,
                "pass_at_k": run_pass,
                "groups": len(groups),
                "zero_variance_groups": len(flat),
                "zero_variance_tasks": [
                    {"task": task.label, "reward": counts.reward_min, "rollouts": counts.scored} for task, counts in flat[:LISTED]
                ],
                "rollouts_without_dispatch": tally.without_dispatch.rollouts,
                "rollouts_without_dispatch_scored": tally.without_dispatch.scored,
            },
            "tasks": task_figures,
            "errors": {"by_type": _by_count(self.error_types), "rollouts": self.failed, "listed": len(self.failed)},
            "health": {
                "spans": self.health_spans,
                "over": "rollouts: the verdict each got last",
                "verdicts": _by_count(tally.verdicts),
                "checks": [{"check": check, "rollouts": count} for check, count in _by_count(tally.checks).items()],
                "judged": run.judged,
                "unhealthy_total": run.unhealthy,
                "without_rollout": tally.verdicts_without_rollout,
                "unhealthy": [],
            },
            "time": {
                "measured": durations.count,
                "without_duration": self.without_duration,
                "p50_ms": quantile(0.50),
                "p95_ms": quantile(0.95),
                "max_ms": durations.max / 1e6 if durations.max is not None else None,
                "mean_ms": durations.total / durations.count / 1e6 if durations.count else None,
                "slowest": [entry for _, _, entry in sorted(self.slowest, key=lambda item: item[:2], reverse=True)],
                "histogram": durations.histogram(),
                "linear_histogram": durations.linear_histogram(),
            },
            "trace_url": self.trace_url,
            "rewards": self._reward_distribution(run),
            "infra_failures": infra,
            "tokens": tally.tokens.figures(self.model_calls, store.tokens_not_kept),
        }
        unhealthy, succeeded_unhealthy = self._unhealthy_listed()
        figures["health"]["unhealthy"] = unhealthy
        figures["reward_health"] = {
            "over": "rollouts",
            "classes": list(OUTCOMES),
            "counts": {
                outcome: {column: crossed[(outcome, column)] for column in VERDICT_COLUMNS if crossed[(outcome, column)]}
                for outcome in OUTCOMES
                if any(crossed[(outcome, column)] for column in VERDICT_COLUMNS)
            },
            "succeeded_unhealthy_total": crossed[(SUCCESS, "unhealthy")],
            "succeeded_unhealthy": succeeded_unhealthy,
        }
        for task_figure in task_figures:
            task_figure["tokens"] = figures["tokens"]["tasks"].get(task_figure["task"])
            task_figure.update(self.task_durations.figures(task_figure["task"]))
        figures["groups"] = {
            "agent": group_figures(task_figures, "agent"),
            "taskset": group_figures(task_figures, "taskset") if any(task.taskset for task in order) else [],
        }
        figures["retries"] = self._retries()
        figures["rollouts"] = self._rollout_rows()
        steps = tally.steps.figures()
        if steps is not None:  # a run whose dispatches name no training step has no per-step figures
            figures["steps"] = steps
        return figures

    def _task_figures(self, task: Task, counts: RolloutCounts) -> dict[str, Any]:
        figures: dict[str, Any] = {
            "task": task.label,
            "task_id": task.task_id,
            "task_index": task.task_index,
            "dispatches": task.dispatches,
            "rollouts": counts.rollouts,
            "failed": counts.of(FAILED_DISPATCH),
            "errors": _by_count(task.error_types) if task.error_types else {},
            "scored": counts.scored,
            "successes": counts.successes,
            "scored_zero": counts.scored_zero,
            "scored_below": counts.of(BELOW),
            "masked": counts.of(MASKED),
            "failure_kinds": counts.of(FAILURE_KIND),
            "unscored": counts.of(UNSCORED),
            "unverified": counts.of(NO_VERIFY),
            "mean_reward": counts.mean,
            "reward_std": counts.reward_std,
            "min_reward": counts.reward_min,
            "max_reward": counts.reward_max,
            "success_rate": counts.successes / counts.scored if counts.scored else None,
            "pass_at_k": {str(k): pass_at_k(counts.scored, counts.successes, k) for k in ks_for(counts.scored)},
            "zero_variance": counts.zero_variance,
            "judged": counts.judged,
            "unhealthy": counts.unhealthy,
            "unhealthy_rate": counts.unhealthy / counts.rollouts if counts.rollouts else None,
            "infra_failures": {
                "rollouts": counts.rollouts,
                "failures": counts.failures,
                "share": counts.failures / counts.rollouts if counts.rollouts else None,
                "kinds": counts.kinds_by_count(),
                "scored_zero": counts.scored_zero,
            },
            "taskset": task.taskset,
            "agent": task.agent,
            "mean_duration_ms": task.duration_total / task.durations / 1e6 if task.durations else None,
            "reward_values": {repr(value): count for value, count in sorted(counts.values.items())},
            "example_trace_id": task.example_trace_id,
        }
        if counts.values_other:
            figures["reward_values_other"] = counts.values_other
        if self.trace_url and task.example_trace_id:
            figures["example_trace_url"] = trace_link(self.trace_url, task.example_trace_id, "")
        return figures

    def _infra(self, run: RolloutCounts, tasks: list[dict[str, Any]], replaced: int) -> dict[str, Any]:
        """Rollouts that failed for a reason other than the model's answer, apart from honest zeros."""
        share = run.failures / run.rollouts if run.rollouts else None
        return {
            "over": "rollouts (a failed attempt that a retry replaced is not one)",
            "rollouts": run.rollouts,
            "failures": run.failures,
            "share": share,
            "kinds": run.kinds_by_count(),
            "scored_zero": run.scored_zero,
            "replaced_attempts": replaced,
            "limit": self.infra_limit,
            "over_limit": share is not None and share > self.infra_limit,
            "tasks": {task["task"]: task["infra_failures"] for task in tasks},
        }

    def _shown(self, row: int, rollout: dict[str, Any]) -> dict[str, Any]:
        """A listed rollout with its task, outcome, reward, failure kind, verdict and checks, as the join found them."""
        store = self.store
        row = store.resolve(row)
        flags = store.flags[row]
        if flags & DISPATCHED:
            rollout["task"] = self.task_list[store.task[row]].label
            outcome, reward, kind = self.outcome(row)
        else:
            outcome, reward, kind = self.outcome(row) if store.verify_head[row] >= 0 else (NO_VERIFY, None, None)
        judged = store.verdict_of(row)
        rollout["outcome"] = outcome
        rollout["reward"] = reward
        rollout["failure_kind"] = kind if outcome == FAILURE_KIND else None
        rollout["verdict"] = None if judged is None else judged[0]
        rollout["checks"] = [] if judged is None else list(judged[1])
        return rollout

    def _unhealthy_listed(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The unhealthy rollouts by name (their verdict the last one, their dispatch read), and those that succeeded."""
        store = self.store
        unhealthy: list[dict[str, Any]] = []
        succeeded: list[dict[str, Any]] = []
        seen: set[int] = set()
        for item in self.unhealthy_seen:
            row = store.resolve(item["row"])
            flags = store.flags[row]
            judged = store.verdict_of(row)
            if row in seen or not flags & DISPATCHED or flags & REPLACED or judged is None or judged[0] != "unhealthy":
                continue
            seen.add(row)
            entry = self._shown(row, {key: value for key, value in item.items() if key != "row"})
            if len(unhealthy) < LISTED:
                unhealthy.append(entry)
            if entry["outcome"] == SUCCESS and len(succeeded) < LISTED:
                succeeded.append(entry)
            if len(unhealthy) >= LISTED and len(succeeded) >= LISTED:
                break
        return unhealthy, succeeded

    def _reward_distribution(self, run: RolloutCounts) -> dict[str, Any]:
        """Every rollout once: its reward value (rounded to 0.01), or its outcome when it has none."""
        values = run.values
        distribution: dict[str, Any] = {
            "over": "rollouts",
            "values": {repr(value): count for value, count in sorted(values.items())},
            "values_other": run.values_other,
            "masked": run.of(MASKED),
            "failure_kind": run.of(FAILURE_KIND),
            "unscored": run.of(UNSCORED),
            "unverified": run.of(NO_VERIFY),
            "failed": run.of(FAILED_DISPATCH),
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

    def _ordered_chains(self) -> list[list[dict[str, Any]]]:
        return [
            sorted(chain, key=lambda step: (step["attempt"], step["start"], step["span_id"])) for chain in self.chains.values()
        ]

    def _retries(self) -> dict[str, Any]:
        """The (task, repeat) pairs that were retried: recovered when their last attempt did not fail."""
        chains: list[dict[str, Any]] = []
        recovered = still_failed = 0
        for ordered in self._ordered_chains():
            last = ordered[-1]
            if len(ordered) < 2 and last["attempt"] == 0:
                continue  # failed, never retried: a failed rollout, not a retry
            outcome = "failed" if last["error_type"] is not None else "recovered"
            recovered += outcome == "recovered"
            still_failed += outcome == "failed"
            if len(chains) < LISTED:
                listed = []
                for step in ordered:
                    entry = {
                        key: value for key, value in step.items() if key not in ("row", "start", "task_index", "repeat", "step")
                    }
                    if step["error_type"] is None and step["row"] >= 0:
                        shown = self._shown(step["row"], {})
                        entry.update(reward=shown["reward"], outcome=shown["outcome"], verdict=shown["verdict"])
                    if self.trace_url:
                        entry["trace_url"] = trace_link(self.trace_url, step["trace_id"], step["span_id"])
                    listed.append(entry)
                chains.append(
                    {
                        "task": last["task"],
                        "task_index": last["task_index"],
                        "repeat": last["repeat"],
                        **({"step": last["step"]} if last["step"] is not None else {}),
                        "outcome": outcome,
                        "attempts": listed,
                    }
                )
        return {
            "retried_dispatches": self.retried_dispatches,
            "recovered": recovered,
            "still_failed": still_failed,
            "chains": chains,
            "followed_limit": CHAINS,
        }

    def _rollout_rows(self) -> dict[str, Any]:
        retry_of: dict[int, str] = {}
        retried_by: dict[int, str] = {}
        for ordered in self._ordered_chains():
            for earlier, later in itertools.pairwise(ordered):
                if earlier["rollout_id"] and later["rollout_id"]:
                    retry_of[later["row"]] = earlier["rollout_id"]
                    retried_by[earlier["row"]] = later["rollout_id"]
        rows = []
        for row, named in self.rows.items():
            entry = self._shown(row, dict(named))
            if row in retry_of:
                entry["retry_of"] = retry_of[row]
            if row in retried_by:
                entry["retried_by"] = retried_by[row]
            if self.store.flags[row] & REPLACED:
                entry["replaced"] = True
            rows.append(entry)
        return {"total": self.dispatches, "listed": len(rows), "rows": rows}


def outcome_label(outcome: str, reward: float | None) -> str:
    """A rollout's reward rounded to 0.01 when it was scored, else its outcome (tokens against reward)."""
    return f"{round(reward, 2):g}" if reward is not None else outcome


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
                "rollouts": 0,
                "infra_failures": 0,
                "scored": 0,
                "reward_total": 0.0,
                "successes": 0,
                "rates": [],
                "unhealthy": 0,
            }
        group["tasks"] += 1
        group["dispatches"] += task["dispatches"]
        group["rollouts"] += task["rollouts"]
        group["infra_failures"] += task["infra_failures"]["failures"]
        group["scored"] += task["scored"]
        group["reward_total"] += (task["mean_reward"] or 0.0) * task["scored"]
        group["successes"] += task["successes"]
        if task["success_rate"] is not None:
            group["rates"].append(task["success_rate"])
        group["unhealthy"] += task["unhealthy"]
    figures = []
    for group in sorted(groups.values(), key=lambda group: (-group["rollouts"], group["name"])):
        rates = group.pop("rates")
        total = group.pop("reward_total")
        group["mean_reward"] = total / group["scored"] if group["scored"] else None
        group["success_rate"] = group["successes"] / group["scored"] if group["scored"] else None
        group["pass_at_1"] = sum(rates) / len(rates) if rates else None
        group["unhealthy_rate"] = group["unhealthy"] / group["rollouts"] if group["rollouts"] else None
        figures.append(group)
    return figures
