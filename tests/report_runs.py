"""Generated rollout runs with their ground truth, written as the package's span files are.

A run (:func:`generate`) is tasks × repeats of rollouts, each attempt of one (task, repeat) a
dispatch; an attempt may fail (and be retried, or not), be scored over several steps under a reward
rule (with step data where every rule gives another answer), carry masked, failure-kind and
non-numeric steps, a verdict (a failed rollout too; sometimes a later re-check), token totals or
model calls, and in some runs the training step and policy version its dispatch names (a rollout
now and then outside every step, or with a step of the wrong type). Rollout ids are in the index
form, a template's form, a custom form, or absent; verify spans are in the dispatch's process or in
another one (another parent); some dispatch spans are lost, as when one process's file is missing.

:func:`write` makes the spans with the real OpenTelemetry SDK (one tracer provider per process,
each with its resource), encodes them with OpenTelemetry's OTLP/JSON file exporter (the encoder of
the package's ``gym_json_file`` exporter: one batch a line), and deals the lines, shuffled, over
several files.

:func:`expected_report` and :func:`expected_compare` compute what the report must say from the
ground truth alone, with their own small plain code.
"""

from __future__ import annotations

import io
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

RULES = ("last", "sum", "max", "first")
ID_FORMS = ("index", "template", "custom", "none")
KINDS = ("env_setup_failed", "sandbox_timeout")
ERRORS = ("aiohttp.ServerDisconnectedError", "builtins.TimeoutError")
VERDICTS = ("healthy", "unhealthy", "unhealthy", "unobserved", "needs_review")
CHECKS = ("model_call_failed", "agent_turn_hollow", "rollout_token_count_mismatch")
# Step rewards where last, sum, max and first all differ (0.0 / 1.0 / 0.5: 0.5, 1.5, 1.0, 0.0).
DISTINCT_STEPS = (0.0, 1.0, 0.5)
CLOCK = 1_796_000_000_000_000_000
MS = 1_000_000


@dataclass
class Step:
    start: int
    reward: float | None  # the reward attribute on the span (None: absent, the result was not numeric)
    masked: bool = False
    failure_kind: str | None = None


@dataclass
class Attempt:
    """One dispatch of a (task, repeat): what happened, and what the spans will say."""

    task: int  # the task's position in Run.tasks
    repeat: int
    attempt: int
    rollout_id: str | None
    start: int
    error: str | None = None  # the dispatch failed with this error.type
    rule: str | None = None  # the verifies' rule attribute (None: absent, "last")
    steps: list[Step] = field(default_factory=list)
    verdicts: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)  # (start, verdict, checks)
    totals: tuple[int, int, int] | None = None  # the dispatch's token totals (input, output, model calls)
    calls: list[tuple[int, int]] = field(default_factory=list)  # model-call spans (input, output)
    dispatch_read: bool = True  # False: the dispatch span is not in the files
    cross_process: bool = False  # its verifies run in another process (another parent, in the dispatch's trace)
    attributes_for_attempt: bool = True  # the dispatch says its repeat and attempt (else: the index-form id does)
    step: Any = None  # the dispatch's nemo.gym.train.step attribute (None: absent; a str: of the wrong type)
    policy: str | None = None  # its nemo.gym.policy.version


@dataclass
class Run:
    tasks: list[tuple[str | None, int | None]]  # (task id, task index)
    id_form: str
    attempts: list[Attempt]
    files: int
    threshold: float
    limit: float
    shared_trace: bool  # every dispatch in one job trace (the launcher's TRACEPARENT as parent)
    with_steps: bool = False  # its dispatches name training steps

    def label(self, task: int) -> str:
        task_id, task_index = self.tasks[task]
        if task_id is not None:
            return task_id
        return f"#{task_index}" if task_index is not None else "(no task id)"


def _steps(rng: random.Random, start: int) -> tuple[str | None, list[Step]]:
    rule = rng.choice((None, *RULES))
    count = rng.choice((0, 1, 1, 2, 3, 3, 4))
    if count == 3 and rng.random() < 0.5:
        rewards: list[float | None] = list(DISTINCT_STEPS)
        rng.shuffle(rewards)
    else:
        rewards = [rng.choice((0.0, 0.0, 0.25, 0.5, 1.0, 1.0, 2.0, None)) for _ in range(count)]
    offsets = rng.sample(range(1, 60), count)  # distinct starts, some after the dispatch ended
    steps = []
    for offset, reward in zip(offsets, rewards, strict=True):
        step = Step(start + offset * 1000, reward)
        luck = rng.random()
        if luck < 0.08:
            step.masked = True  # with its reward attribute kept or not: it never counts
            step.reward = reward if rng.random() < 0.5 else None
        elif luck < 0.14:
            step.failure_kind = rng.choice(KINDS)
            step.reward = rng.choice((0.0, None, 1.0))
        steps.append(step)
    return rule, steps


def generate(rng: random.Random, tasks: list[tuple[str | None, int | None]] | None = None, id_form: str | None = None) -> Run:
    id_form = id_form or rng.choice(ID_FORMS)
    if tasks is None:
        count = rng.randint(1, 4)
        indices = rng.sample(range(10), count)
        tasks = []
        for index in indices:
            has_id = id_form == "template" or rng.random() < 0.7
            tasks.append((f"task-{index}" if has_id else None, None if id_form == "template" else index))
    if id_form == "template":  # the template names tasks by id: every task has one
        tasks = [(task_id or f"task-{index}", index) for task_id, index in tasks]
    if id_form == "index":  # the index form names tasks by index: every task has one
        tasks = [(task_id, index if index is not None else 90 + position) for position, (task_id, index) in enumerate(tasks)]
    run = Run(
        tasks=tasks,
        id_form=id_form,
        attempts=[],
        files=rng.randint(1, 4),
        threshold=rng.choice((1.0, 1.0, 0.5)),
        limit=rng.choice((0.05, 0.3, 0.6)),
        shared_trace=id_form != "none" and rng.random() < 0.2,
        with_steps=rng.random() < 0.6,
    )
    step_count = rng.randint(1, 4)
    # A trainer re-runs its tasks at every step (the same task indices and repeats, each step's rollouts in
    # traces of their own), or its tasks are spread over the steps.
    rounds_of_steps = run.with_steps and rng.random() < 0.5
    if rounds_of_steps:
        run.shared_trace = False  # (one trace would hold one rollout id of every step: one rollout)
    clock = CLOCK
    custom = iter(rng.sample(range(10_000, 99_999), 200))
    for round_step in range(step_count) if rounds_of_steps else [None]:
        for task in range(len(tasks)):
            for repeat in range(rng.randint(1, 3)):
                # The trainer's step of this rollout (its retries are in the same step): the round's, or one of
                # the steps; now and then none (sent outside every step). Its policy: the step's, sometimes the
                # one before (an asynchronous trainer's), or unsaid.
                if rounds_of_steps:
                    step = round_step
                else:
                    step = rng.randrange(step_count) if run.with_steps and rng.random() < 0.9 else None
                policy = None if step is None else rng.choice((f"ckpt-{step}", f"ckpt-{step}", f"ckpt-{max(step - 1, 0)}", None))
                retries = rng.choice((0, 0, 0, 1, 1, 2))
                for attempt in range(retries + 1):
                    clock += rng.randint(1, 5) * MS
                    last = attempt == retries
                    task_id, task_index = tasks[task]
                    suffix = f"-a{attempt}" if attempt else ""
                    rollout_id = {
                        "index": f"{task_index}-{repeat}{suffix}",
                        "template": f"{task_id}-r{repeat}{suffix}",
                        "custom": f"ep-{next(custom)}",
                        "none": None,
                    }[id_form]
                    item = Attempt(task, repeat, attempt, rollout_id, clock, step=step, policy=policy)
                    if step is not None and not rounds_of_steps and rng.random() < 0.03:
                        item.step = str(step)  # a step of the wrong type: not a step
                    # Every attempt but the last failed; the last fails now and then too (retried or not).
                    if not last or rng.random() < 0.15:
                        item.error = rng.choice(ERRORS)
                    item.rule, item.steps = _steps(rng, clock)
                    if item.error is not None and rng.random() < 0.6:
                        item.steps = []  # most failed dispatches never reached a verify
                    if rng.random() < 0.6:
                        judged = [(CLOCK + 10**12, rng.choice(VERDICTS), tuple(sorted(rng.sample(CHECKS, rng.randint(0, 2)))))]
                        if rng.random() < 0.15:  # a re-check, later
                            judged.append((CLOCK + 2 * 10**12, rng.choice(VERDICTS), ()))
                        item.verdicts = judged
                    tokens = rng.random()
                    if tokens < 0.25:
                        item.totals = (rng.randint(0, 900), rng.randint(0, 300), rng.randint(1, 4))
                    if 0.15 < tokens < 0.45:
                        item.calls = [(rng.randint(0, 500), rng.randint(0, 200)) for _ in range(rng.randint(1, 3))]
                    item.dispatch_read = rng.random() > 0.07
                    item.cross_process = rng.random() < 0.4
                    item.attributes_for_attempt = id_form != "index" or rng.random() < 0.7
                    run.attempts.append(item)
    return run


# -- the spans, as processes export them --------------------------------------------------------


def _identity(run: Run, item: Attempt) -> dict[str, Any]:
    task_id, task_index = run.tasks[item.task]
    attributes: dict[str, Any] = {}
    if task_id is not None:
        attributes["nemo.gym.task.id"] = task_id
    if task_index is not None:
        attributes["nemo.gym.task.index"] = task_index
    if item.attributes_for_attempt:
        attributes["nemo.gym.rollout.repeat"] = item.repeat
        attributes["nemo.gym.rollout.attempt"] = item.attempt
    if item.rollout_id is not None:
        attributes["nemo.gym.rollout.id"] = item.rollout_id
    attributes["nemo.gym.agent.name"] = "agent"
    if item.step is not None:
        attributes["nemo.gym.train.step"] = item.step
    if item.policy is not None:
        attributes["nemo.gym.policy.version"] = item.policy
    return attributes


def _remote(trace_id: int, span_id: int) -> Any:
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(context))


def spans(run: Run, rng: random.Random) -> dict[str, list[ReadableSpan]]:
    """Each process's finished spans: the collector (dispatches, its own verifies, model calls), the
    environment server (verifies of another process) and the health pass."""
    processes = {}
    for name in ("collector", "environment", "health"):
        provider = TracerProvider(resource=Resource.create({"service.name": name}), shutdown_on_exit=False)
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        processes[name] = (provider.get_tracer("gym_instrument"), exporter)
    collector, environment, health = (processes[name][0] for name in ("collector", "environment", "health"))
    job = _remote(rng.getrandbits(128) | 1, rng.getrandbits(64) | 1) if run.shared_trace else None
    lost: set[int] = set()  # span ids of the dispatches whose spans are not in the files
    for item in run.attempts:
        identity = _identity(run, item)
        dispatch = collector.start_span("gym.rollout.dispatch", context=job, attributes=identity, start_time=item.start)
        dispatch_context = trace.set_span_in_context(dispatch)
        if item.totals is not None:
            dispatch.set_attributes(
                {
                    "gen_ai.usage.input_tokens": item.totals[0],
                    "gen_ai.usage.output_tokens": item.totals[1],
                    "nemo.gym.rollout.model_calls": item.totals[2],
                }
            )
        for tokens_in, tokens_out in item.calls:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": tokens_out,
            }
            if item.rollout_id is not None:
                attributes["nemo.gym.rollout.id"] = item.rollout_id
            call = collector.start_span(
                "chat m", context=dispatch_context, kind=SpanKind.CLIENT, attributes=attributes, start_time=item.start + 10
            )
            call.end(end_time=item.start + 20)
        for step in item.steps:
            attributes = {}
            if item.rollout_id is not None:
                attributes["nemo.gym.rollout.id"] = item.rollout_id
            if step.reward is not None:
                attributes["nemo.gym.rollout.reward"] = step.reward
            if step.masked:
                attributes["nemo.gym.verify.masked"] = True
            if step.failure_kind is not None:
                attributes["nemo.gym.failure_kind"] = step.failure_kind
            if item.rule is not None:
                attributes["nemo.gym.rollout.reward_rule"] = item.rule
            if item.cross_process:  # another process: its parent is that server's span, in the dispatch's trace
                tracer = environment
                context = _remote(dispatch.get_span_context().trace_id, rng.getrandbits(64) | 1)
            else:
                tracer, context = collector, dispatch_context
            verify = tracer.start_span("gym.verify", context=context, attributes=attributes, start_time=step.start)
            verify.end(end_time=step.start + 500)
        if item.error is not None:
            dispatch.set_attribute("error.type", item.error)
            dispatch.set_status(Status(StatusCode.ERROR))
        dispatch.end(end_time=item.start + 30_000 + item.attempt * 1000)
        if not item.dispatch_read:
            lost.add(dispatch.get_span_context().span_id)
        for start, verdict, checks in item.verdicts:
            attributes = {"nemo.gym.health.verdict": verdict, "nemo.gym.health.checks": list(checks)}
            if item.rollout_id is not None:
                attributes["nemo.gym.rollout.id"] = item.rollout_id
            judged = health.start_span(
                "gym.rollout.health", context=trace.set_span_in_context(NonRecordingSpan(dispatch.get_span_context())),
                attributes=attributes, start_time=start,
            )  # fmt: skip
            judged.end(end_time=start)
    finished = {}
    for name, (_, exporter) in processes.items():
        finished[name] = [span for span in exporter.get_finished_spans() if span.context.span_id not in lost]
    return finished


def lines(run: Run, rng: random.Random) -> list[str]:
    """The spans as OTLP/JSON lines, one export batch a line, each process's batches of its own."""
    encoded = []
    for finished in spans(run, rng).values():
        position = 0
        while position < len(finished):
            size = rng.randint(1, 12)
            buffer = io.StringIO()
            FileSpanExporter(stream=buffer).export(finished[position : position + size])
            encoded += buffer.getvalue().splitlines()
            position += size
    return encoded


def write(run: Run, rng: random.Random, folder: Path) -> list[Path]:
    """The run's span lines, shuffled within and across ``run.files`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    encoded = lines(run, rng)
    rng.shuffle(encoded)
    dealt: list[list[str]] = [[] for _ in range(run.files)]
    for line in encoded:
        dealt[rng.randrange(run.files)].append(line)
    paths = []
    for number, file_lines in enumerate(dealt):
        path = folder / f"process-{number}.jsonl"
        path.write_text("".join(line + "\n" for line in file_lines))
        paths.append(path)
    return paths


# -- what the report must say, from the ground truth ------------------------------------------------


def decided(steps: list[Step], rule: str | None) -> tuple[str, Any]:
    """("reward", r), ("masked",), ("kind", k) or ("unscored",): the reward rule, plainly."""
    ordered = sorted(steps, key=lambda step: step.start)
    rule = rule or "last"

    def said(step: Step) -> tuple[str, Any]:
        if step.failure_kind is not None:
            return ("kind", step.failure_kind)
        if step.masked:
            return ("masked", None)
        return ("reward", step.reward) if step.reward is not None else ("unscored", None)

    if rule == "sum":
        kinds = [step.failure_kind for step in ordered if step.failure_kind is not None]
        if kinds:
            return ("kind", kinds[-1])
        if any(step.masked for step in ordered):
            return ("masked", None)
        rewards = [step.reward for step in ordered if step.reward is not None]
        return ("reward", sum(rewards)) if rewards else ("unscored", None)
    if rule == "max":
        best: Step | None = None
        for step in ordered:
            if step.reward is not None and not step.masked and (best is None or step.reward > (best.reward or 0.0)):
                best = step
        return said(best if best is not None else ordered[-1])
    return said(ordered[0] if rule == "first" else ordered[-1])


@dataclass
class Truth:
    """A rollout as the report must count it."""

    item: Attempt
    label: str
    outcome: str
    reward: float | None
    kind: str | None
    verdict: tuple[str, tuple[str, ...]] | None


def truths(run: Run) -> tuple[list[Truth], list[Attempt], list[Attempt]]:
    """(the rollouts, the failed attempts a retry replaced, the attempts whose dispatch was not read)."""
    read = [item for item in run.attempts if item.dispatch_read]
    highest: dict[tuple[int, int, int | None], int] = {}
    for item in read:
        pair = (item.task, item.repeat, step_of(item))  # a trainer numbers its tasks anew at every step
        highest[pair] = max(highest.get(pair, 0), item.attempt)
    rollouts, replaced = [], []
    for item in read:
        if item.error is not None and item.attempt < highest[(item.task, item.repeat, step_of(item))]:
            replaced.append(item)
            continue
        reward = kind = None
        if item.error is not None:
            outcome, kind = "failed dispatch", item.error
        elif not item.steps:
            outcome = "no verify"
        else:
            said, value = decided(item.steps, item.rule)
            if said == "kind":
                outcome, kind = "failure kind", value
            elif said == "masked":
                outcome, kind = "masked", "masked"
            elif said == "unscored":
                outcome = "unscored"
            else:
                reward = value
                outcome = "success" if value >= run.threshold else "below threshold"
        verdict = max(item.verdicts)[1:] if item.verdicts else None
        rollouts.append(Truth(item, run.label(item.task), outcome, reward, kind, verdict))
    return rollouts, replaced, [item for item in run.attempts if not item.dispatch_read]


INFRA = ("masked", "failure kind", "failed dispatch")


def step_of(item: Attempt) -> int | None:
    """The step a rollout is counted under: its dispatch's step attribute when it is an int >= 0."""
    return item.step if type(item.step) is int and item.step >= 0 else None


def tokens_of(item: Attempt) -> tuple[int, int, int, bool] | None:
    """A rollout's (input, output, model calls, from its dispatch's totals): its totals, else its model calls summed."""
    if item.totals is not None:
        return (item.totals[0], item.totals[1], item.totals[2], True)
    if item.calls:
        return (sum(c[0] for c in item.calls), sum(c[1] for c in item.calls), len(item.calls), False)
    return None


def _step_counts(rollouts: list[Truth]) -> dict[str, Any]:
    rewards = [truth.reward for truth in rollouts if truth.reward is not None]
    successes = sum(truth.outcome == "success" for truth in rollouts)
    infra = sum(truth.outcome in INFRA for truth in rollouts)
    used = [tokens for truth in rollouts if (tokens := tokens_of(truth.item)) is not None]
    total = sum(tokens[0] + tokens[1] for tokens in used)
    return {
        "policy_versions": sorted({truth.item.policy for truth in rollouts if truth.item.policy is not None}),
        "rollouts": len(rollouts),
        "scored": len(rewards),
        "successes": successes,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "success_rate": successes / len(rewards) if rewards else None,
        "infra_failures": infra,
        "infra_share": infra / len(rollouts),
        "token_rollouts": len(used),
        "tokens": total,
        "tokens_mean": total / len(used) if used else None,
    }


def expected_steps(rollouts: list[Truth]) -> dict[int | None, dict[str, Any]] | None:
    """Per step, its rollouts' figures (the rollouts of no step under None); None when no rollout has a step."""
    by_step: dict[int | None, list[Truth]] = {}
    for truth in rollouts:
        by_step.setdefault(step_of(truth.item), []).append(truth)
    if all(step is None for step in by_step):
        return None
    return {step: _step_counts(mine) for step, mine in by_step.items()}


def _counts(rollouts: list[Truth]) -> dict[str, Any]:
    outcomes = Counter(truth.outcome for truth in rollouts)
    rewards = [truth.reward for truth in rollouts if truth.reward is not None]
    kinds = Counter(truth.kind for truth in rollouts if truth.outcome in INFRA)
    return {
        "rollouts": len(rollouts),
        "scored": len(rewards),
        "successes": outcomes["success"],
        "scored_zero": sum(reward == 0.0 for reward in rewards),
        "masked": outcomes["masked"],
        "failure_kinds": outcomes["failure kind"],
        "failed": outcomes["failed dispatch"],
        "unscored": outcomes["unscored"],
        "unverified": outcomes["no verify"],
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "success_rate": outcomes["success"] / len(rewards) if rewards else None,
        "infra": sum(kinds.values()),
        "kinds": dict(kinds),
        "unhealthy": sum(1 for truth in rollouts if truth.verdict is not None and truth.verdict[0] == "unhealthy"),
        "judged": sum(1 for truth in rollouts if truth.verdict is not None),
    }


def expected_report(run: Run) -> dict[str, Any]:
    """The report's figures for ``run``, by the rules in plain words (a subset of its JSON, in its shape)."""
    rollouts, replaced, lost = truths(run)
    everything = _counts(rollouts)
    read = [item for item in run.attempts if item.dispatch_read]
    lost_verified = [item for item in lost if item.steps]
    health_spans = sum(len(item.verdicts) for item in run.attempts)
    rewards = Counter(round(truth.reward, 2) for truth in rollouts if truth.reward is not None)
    tasks = {}
    for task in range(len(run.tasks)):
        mine = [truth for truth in rollouts if truth.item.task == task]
        dispatched = [item for item in read if item.task == task]
        if not dispatched:
            continue
        counts = _counts(mine)
        tasks[run.label(task)] = {**counts, "dispatches": len(dispatched)}
    crossed: Counter[tuple[str, str]] = Counter()
    for truth in rollouts:
        name = truth.verdict[0] if truth.verdict else None
        column = "no verdict" if name is None else (name if name in ("healthy", "unhealthy", "unobserved") else "other verdict")
        crossed[(truth.outcome, column)] += 1
    chains: dict[tuple[int, int, int | None], list[Attempt]] = {}
    for item in read:
        chains.setdefault((item.task, item.repeat, step_of(item)), []).append(item)
    retried = [chain for chain in chains.values() if len(chain) > 1 or max(item.attempt for item in chain) > 0]
    still_failed = sum(1 for chain in retried if max(chain, key=lambda item: item.attempt).error is not None)
    tokens = [used for truth in rollouts if (used := tokens_of(truth.item)) is not None]
    share = everything["infra"] / everything["rollouts"] if everything["rollouts"] else None
    return {
        "run": {
            "tasks": len(tasks),
            "dispatches": len(read),
            "replaced_attempts": len(replaced),
            "rollouts_without_dispatch": len(lost_verified),
            "rollouts_without_dispatch_scored": sum(1 for item in lost_verified if decided(item.steps, item.rule)[0] == "reward"),
            **everything,
        },
        "tasks": tasks,
        "health": {
            "spans": health_spans,
            "verdicts": dict(Counter(truth.verdict[0] for truth in rollouts if truth.verdict)),
            "checks": dict(Counter(check for truth in rollouts if truth.verdict for check in truth.verdict[1])),
            "without_rollout": sum(1 for item in [*replaced, *lost] if item.verdicts),
            "unhealthy": sorted(
                (truth.label, truth.item.rollout_id) for truth in rollouts if truth.verdict and truth.verdict[0] == "unhealthy"
            ),
        },
        "crossed": dict(crossed),
        "rewards": {repr(value): count for value, count in sorted(rewards.items())},
        "retries": {
            "retried_dispatches": sum(1 for item in read if item.attempt > 0),
            "recovered": len(retried) - still_failed,
            "still_failed": still_failed,
        },
        "tokens": {
            "rollouts": len(tokens),
            "input_tokens": sum(t[0] for t in tokens),
            "output_tokens": sum(t[1] for t in tokens),
            "model_calls": sum(t[2] for t in tokens),
            "from_dispatch_totals": sum(t[3] for t in tokens),
        },
        "infra": {"failures": everything["infra"], "share": share, "over_limit": share is not None and share > run.limit},
        **({"steps": steps} if (steps := expected_steps(rollouts)) is not None else {}),
        "exit_code": 4 if share is not None and share > run.limit else 0,
    }


STEP_FIGURES = (
    "policy_versions",
    "rollouts",
    "scored",
    "successes",
    "mean_reward",
    "success_rate",
    "infra_failures",
    "infra_share",
    "token_rollouts",
    "tokens",
    "tokens_mean",
)


def report_figures(figures: dict[str, Any]) -> dict[str, Any]:
    """The same subset of what the report said (its ``--format json``), in the same shape."""
    run = figures["run"]
    names = [
        "rollouts",
        "scored",
        "successes",
        "scored_zero",
        "masked",
        "failure_kinds",
        "failed",
        "unscored",
        "unverified",
        "mean_reward",
        "success_rate",
    ]

    def counts(source: dict[str, Any], infra: dict[str, Any], unhealthy: int, judged: int) -> dict[str, Any]:
        return {
            **{name: source[name] for name in names},
            "infra": infra["failures"],
            "kinds": infra["kinds"],
            "unhealthy": unhealthy,
            "judged": judged,
        }

    tasks = {
        task["task"]: {
            **counts(task, task["infra_failures"], task["unhealthy"], task["judged"]),
            "dispatches": task["dispatches"],
        }
        for task in figures["tasks"]
    }
    crossed = {
        (outcome, column): count
        for outcome, columns in figures["reward_health"]["counts"].items()
        for column, count in columns.items()
    }
    health = figures["health"]
    tokens = figures["tokens"]
    infra = figures["infra_failures"]
    steps = {
        step["step"]: {name: step[name] for name in STEP_FIGURES}
        for step in figures.get("steps", [])  # (absent: no rollout's dispatch named a step)
    }
    return {
        **({"steps": steps} if "steps" in figures else {}),
        "run": {
            "tasks": run["tasks"],
            "dispatches": run["dispatches"],
            "replaced_attempts": run["replaced_attempts"],
            "rollouts_without_dispatch": run["rollouts_without_dispatch"],
            "rollouts_without_dispatch_scored": run["rollouts_without_dispatch_scored"],
            **counts(run, infra, run["unhealthy"], run["judged"]),
        },
        "tasks": tasks,
        "health": {
            "spans": health["spans"],
            "verdicts": health["verdicts"],
            "checks": {item["check"]: item["rollouts"] for item in health["checks"]},
            "without_rollout": health["without_rollout"],
            "unhealthy": sorted((item["task"], item["rollout_id"]) for item in health["unhealthy"]),
        },
        "crossed": crossed,
        "rewards": figures["rewards"]["values"],
        "retries": {name: figures["retries"][name] for name in ("retried_dispatches", "recovered", "still_failed")},
        "tokens": {
            name: tokens[name] for name in ("rollouts", "input_tokens", "output_tokens", "model_calls", "from_dispatch_totals")
        },
        "infra": {"failures": infra["failures"], "share": infra["share"], "over_limit": infra["over_limit"]},
    }


def close(expected: Any, found: Any) -> bool:
    """Equal, floats within rounding (a mean summed in another order)."""
    if isinstance(expected, float) and isinstance(found, float):
        return math.isclose(expected, found, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(expected, dict) and isinstance(found, dict):
        return expected.keys() == found.keys() and all(close(expected[key], found[key]) for key in expected)
    if isinstance(expected, list) and isinstance(found, list):
        return len(expected) == len(found) and all(close(a, b) for a, b in zip(expected, found, strict=True))
    return bool(expected == found)


def differences(expected: Any, found: Any, path: str = "") -> list[str]:
    """Where ``found`` is not ``expected``, one line each."""
    if isinstance(expected, dict) and isinstance(found, dict):
        lines = []
        for key in sorted(set(expected) | set(found), key=str):
            if key not in found or key not in expected:
                lines.append(f"{path}/{key}: expected {expected.get(key)!r}, found {found.get(key)!r}")
            else:
                lines += differences(expected[key], found[key], f"{path}/{key}")
        return lines
    return [] if close(expected, found) else [f"{path}: expected {expected!r}, found {found!r}"]


# -- compare ------------------------------------------------------------------------------------------

ORDER = (("mean_reward", 1), ("success_rate", 1), ("unhealthy_rate", -1), ("infra_rate", -1))


def _measures(counts: dict[str, Any], health_pass: bool) -> dict[str, Any]:
    rollouts = counts["rollouts"]
    return {
        "mean_reward": counts["mean_reward"],
        "success_rate": counts["success_rate"],
        "unhealthy_rate": counts["unhealthy"] / rollouts if rollouts and health_pass else None,
        "infra_rate": counts["infra"] / rollouts if rollouts else None,
    }


def _change(a: dict[str, Any], b: dict[str, Any]) -> str:
    if a["mean_reward"] is None and b["mean_reward"] is not None:
        return "new"
    if a["mean_reward"] is not None and b["mean_reward"] is None:
        return "worse"
    for name, sign in ORDER:
        if a[name] is None or b[name] is None or abs(b[name] - a[name]) <= 1e-9:
            continue
        return "worse" if (b[name] - a[name]) * sign < 0 else "better"
    return "same"


COMPARED_STEP_FIGURES = ("rollouts", "mean_reward", "success_rate", "infra_share", "tokens_mean")


def expected_compare(run_a: Run, run_b: Run) -> dict[str, Any]:
    """What ``compare`` must say of B against A, per task and overall."""
    report_a, report_b = expected_report(run_a), expected_report(run_b)
    health_a, health_b = report_a["health"]["spans"] > 0, report_b["health"]["spans"] > 0
    tasks = {}
    for label, counts_a in report_a["tasks"].items():
        counts_b = report_b["tasks"].get(label)
        if counts_b is None:
            continue
        a, b = _measures(counts_a, health_a), _measures(counts_b, health_b)
        tasks[label] = {"change": _change(a, b), **{name: {"a": a[name], "b": b[name]} for name in a}}
    a, b = _measures(report_a["run"], health_a), _measures(report_b["run"], health_b)
    steps_a, steps_b = report_a.get("steps") or {}, report_b.get("steps") or {}
    steps = {
        step: {
            name: {"a": (steps_a.get(step) or {}).get(name), "b": (steps_b.get(step) or {}).get(name)}
            for name in COMPARED_STEP_FIGURES
        }
        for step in steps_a.keys() | steps_b.keys()
    }
    return {
        **({"steps": steps} if steps else {}),
        "tasks": tasks,
        "overall_change": _change(a, b),
        "overall": {name: {"a": a[name], "b": b[name]} for name in a},
        "changes": dict(Counter(task["change"] for task in tasks.values())),
        "only_in_a": sorted(set(report_a["tasks"]) - set(report_b["tasks"])),
        "only_in_b": sorted(set(report_b["tasks"]) - set(report_a["tasks"])),
    }


def compare_figures(comparison: dict[str, Any]) -> dict[str, Any]:
    """The same subset of what ``compare --format json`` said."""
    names = ("mean_reward", "success_rate", "unhealthy_rate", "infra_rate")
    steps = {
        step["step"]: {name: {side: step["measures"][name][side] for side in "ab"} for name in COMPARED_STEP_FIGURES}
        for step in comparison.get("steps", [])
    }
    return {
        **({"steps": steps} if "steps" in comparison else {}),
        "tasks": {
            task["task"]: {
                "change": task["change"],
                **{name: {side: task["measures"][name][side] for side in "ab"} for name in names},
            }
            for task in comparison["tasks"]
        },
        "overall_change": comparison["overall_change"],
        "overall": {name: {side: comparison["overall"][name][side] for side in "ab"} for name in names},
        "changes": {name: count for name, count in comparison["changes"].items() if count},
        "only_in_a": sorted(comparison["only_in_a"]),
        "only_in_b": sorted(comparison["only_in_b"]),
    }
