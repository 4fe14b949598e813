"""The end-to-end assertions: what the OTLP receiver got, against what NeMo Gym wrote.

Every check appends a readable failure instead of raising, so one run reports everything
that is wrong at once.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from gym_harness.otlp_json import Received, Span
from gym_harness.processes import log

DISPATCH_SPAN = "gym.rollout.dispatch"
VERIFY_SPAN = "gym.verify"
HEALTH_SPAN = "gym.rollout.health"
REWARDED_COUNTER = "gym.rollout.rewarded_total"
VERDICTS_COUNTER = "gym.rollout.verdicts"

ROLLOUT_ID = "nemo.gym.rollout.id"
TASK_ID = "nemo.gym.task.id"
TASK_INDEX = "nemo.gym.task.index"
REPEAT = "nemo.gym.rollout.repeat"
AGENT_NAME = "nemo.gym.agent.name"
REWARD = "nemo.gym.rollout.reward"
VERDICT = "nemo.gym.health.verdict"
CHECKS = "nemo.gym.health.checks"
# Model-call spans (GenAI) and a rollout's token totals on its dispatch.
GEN_AI_OPERATION = "gen_ai.operation.name"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
MODEL_CALLS = "nemo.gym.rollout.model_calls"

TASK_ID_FIELDS = ("task_id", "problem_id", "instance_id")
CAPTURE_NO_RECORDS = "model_call_capture_no_records"


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    spans_checked: Counter[str] = field(default_factory=Counter)  # gym spans checked, by name

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def check(self, condition: bool, message: str) -> bool:
        if not condition:
            self.failures.append(message)
        return condition

    def conclude(self, title: str, figures: dict[str, int], elapsed: float, work: Any) -> int:
        """Print the run's verdict, its figures, notes and failures; the exit code (0: passed)."""
        print()
        status = "FAILED" if self.failures else "passed"
        print(f"{title}: {status}: " + ", ".join(f"{value} {name}" for name, value in figures.items()))
        for note in self.notes:
            print(f"    {note}")
        for failure in self.failures:
            print(f"  - {failure}")
        if self.failures:
            log(f"FAILED after {elapsed:.0f}s: {len(self.failures)} problem(s); logs in {work}")
            return 1
        log(f"PASSED in {elapsed:.0f}s; logs in {work}")
        return 0


@dataclass(frozen=True)
class Rollout:
    """One rollout as NeMo Gym recorded it: the dispatched row and the scored result."""

    task_index: int
    rollout_index: int
    row: dict[str, Any]
    reward: float | None
    # NeMo Gym's own model-call capture gaps on the result row (0.7.0, capture on), e.g.
    # `model_call_capture_no_records` when the collector found no captured call for it.
    capture_gaps: tuple[str, ...] = ()
    # The token usage NeMo Gym wrote for it (`response.usage`, else a native result's `usage`):
    # (input, output), or None when its row has none.
    usage: tuple[Any, Any] | None = None
    # How many model calls its row's `ng_trajectory.model_calls` lists (None: no such list, or empty).
    model_calls: int | None = None

    @property
    def native(self) -> bool:
        """A materialized task row (`task_id.taskset` plus `task_input`), dispatched as a native episode."""
        return isinstance(self.row.get("task_id"), dict) and "task_input" in self.row

    @property
    def agent_name(self) -> str | None:
        """The row's `agent_ref.name`; a native episode body names no agent."""
        agent_ref = self.row.get("agent_ref")
        return None if self.native or not isinstance(agent_ref, dict) else agent_ref.get("name")

    @property
    def rollout_id(self) -> str:
        explicit = self.row.get("_ng_rollout_id")
        if isinstance(explicit, str) and explicit:
            return explicit
        rollout_id = f"{self.task_index}-{self.rollout_index}"
        attempt = self.row.get("_ng_attempt_index")
        if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0:
            rollout_id += f"-a{attempt}"
        return rollout_id

    @property
    def expected_task_id(self) -> str | None:
        for name in (*TASK_ID_FIELDS, "task_name"):
            value = self.row.get(name)
            if value is None or value == "" or isinstance(value, bool):
                continue
            if isinstance(value, (dict, list)):
                return json.dumps(value, sort_keys=True, separators=(",", ":"))
            return str(value)
        return None


def _usage(result: dict[str, Any]) -> tuple[Any, Any] | None:
    for holder in (result.get("response"), result, result.get("result")):
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(usage, dict):
            return usage.get("input_tokens"), usage.get("output_tokens")
    return None


def _listed_model_calls(result: dict[str, Any]) -> int | None:
    trajectory = result.get("ng_trajectory")
    calls = trajectory.get("model_calls") if isinstance(trajectory, dict) else None
    return len(calls) if isinstance(calls, list) and calls else None


def join_rollouts(materialized_rows: list[dict[str, Any]], results: list[dict[str, Any]], report: Report) -> list[Rollout]:
    """Pair each result in rollouts.jsonl with the row that was dispatched for it.

    Results do not carry all of the input's fields (0.7.0's carry none of its dataset fields,
    task_id included), the materialized inputs do: joined on (_ng_task_index, _ng_rollout_index).
    """
    rows_by_key = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in materialized_rows}
    rollouts = []
    for result in results:
        key = (result["_ng_task_index"], result["_ng_rollout_index"])
        row = rows_by_key.get(key)
        if not report.check(row is not None, f"rollouts.jsonl has {key} but the materialized inputs do not"):
            continue
        reward = result.get("reward")
        rollouts.append(
            Rollout(
                task_index=key[0],
                rollout_index=key[1],
                row=row,
                reward=float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
                capture_gaps=tuple(str(gap.get("code")) for gap in (result.get("ng_model_call_capture") or {}).get("gaps") or ()),
                usage=_usage(result),
                model_calls=_listed_model_calls(result),
            )
        )
    return sorted(rollouts, key=lambda r: (r.task_index, r.rollout_index))


def _by_rollout_id(spans: list[Span], span_name: str, report: Report) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = defaultdict(list)
    missing = 0
    for span in spans:
        if span.name != span_name:
            continue
        rollout_id = span.attributes.get(ROLLOUT_ID)
        if isinstance(rollout_id, str) and rollout_id:
            grouped[rollout_id].append(span)
        else:
            missing += 1
    report.check(missing == 0, f"{missing} `{span_name}` span(s) carry no `{ROLLOUT_ID}`")
    return grouped


def _ancestry(span: Span, spans_by_id: dict[str, Span]) -> list[Span]:
    chain = [span]
    while chain[-1].parent_span_id and len(chain) < 64:
        parent = spans_by_id.get(chain[-1].parent_span_id)
        if parent is None:
            break
        chain.append(parent)
    return chain


def _one_per_rollout(rollouts: list[Rollout], received: Received, span_name: str, report: Report) -> dict[str, list[Span]]:
    """The spans of one name by rollout id, after checking there are as many as rollouts, none a stranger."""
    total = sum(1 for span in received.spans if span.name == span_name)
    report.spans_checked[span_name] += total
    report.check(
        total == len(rollouts),
        f"expected {len(rollouts)} `{span_name}` spans (one per rollout in rollouts.jsonl), got {total}",
    )
    grouped = _by_rollout_id(received.spans, span_name, report)
    for unexpected in sorted(set(grouped) - {rollout.rollout_id for rollout in rollouts}):
        report.fail(f"`{span_name}` with {ROLLOUT_ID}={unexpected!r} matches no rollout in rollouts.jsonl")
    return grouped


def check_gym_spans(rollouts: list[Rollout], received: Received, report: Report) -> dict[str, Span]:
    """Per rollout: one dispatch span with the row's identity, one verify span with its reward.

    Returns the dispatch span of each rollout id that has exactly one.
    """
    spans_by_id = {span.span_id: span for span in received.spans}
    dispatches = _one_per_rollout(rollouts, received, DISPATCH_SPAN, report)
    verifies = _one_per_rollout(rollouts, received, VERIFY_SPAN, report)

    matched: dict[str, Span] = {}
    dispatch_traces: dict[str, str] = {}
    for rollout in rollouts:
        rid = rollout.rollout_id
        found = dispatches.get(rid, [])
        if not report.check(len(found) == 1, f"rollout {rid}: expected 1 `{DISPATCH_SPAN}`, got {len(found)}"):
            continue
        dispatch = matched[rid] = found[0]
        attrs = dispatch.attributes
        report.check(dispatch.kind == "INTERNAL", f"rollout {rid}: dispatch span kind is {dispatch.kind}, not INTERNAL")
        report.check(dispatch.status != "ERROR", f"rollout {rid}: dispatch span status is ERROR")
        report.check(
            attrs.get(REPEAT) == rollout.rollout_index and not isinstance(attrs.get(REPEAT), bool),
            f"rollout {rid}: {REPEAT}={attrs.get(REPEAT)!r}, expected {rollout.rollout_index}",
        )
        report.check(
            attrs.get(TASK_INDEX) == rollout.task_index,
            f"rollout {rid}: {TASK_INDEX}={attrs.get(TASK_INDEX)!r}, expected {rollout.task_index}",
        )
        expected_task_id = rollout.expected_task_id
        if expected_task_id is None:
            report.check(TASK_ID not in attrs, f"rollout {rid}: the row has no task id, yet {TASK_ID}={attrs.get(TASK_ID)!r}")
        else:
            report.check(
                attrs.get(TASK_ID) == expected_task_id,
                f"rollout {rid}: {TASK_ID}={attrs.get(TASK_ID)!r}, expected {expected_task_id!r}",
            )
        if rollout.agent_name is None:
            report.check(
                AGENT_NAME not in attrs,
                f"rollout {rid}: a native episode names no agent, yet {AGENT_NAME}={attrs.get(AGENT_NAME)!r}",
            )
        else:
            report.check(
                attrs.get(AGENT_NAME) == rollout.agent_name,
                f"rollout {rid}: {AGENT_NAME}={attrs.get(AGENT_NAME)!r}, expected {rollout.agent_name!r}",
            )
        previous = dispatch_traces.get(dispatch.trace_id)
        report.check(previous is None, f"rollouts {previous} and {rid} share trace {dispatch.trace_id}")
        dispatch_traces[dispatch.trace_id] = rid

        found_verify = verifies.get(rid, [])
        if not report.check(len(found_verify) == 1, f"rollout {rid}: expected 1 `{VERIFY_SPAN}`, got {len(found_verify)}"):
            continue
        verify = found_verify[0]
        report.check(verify.kind == "INTERNAL", f"rollout {rid}: verify span kind is {verify.kind}, not INTERNAL")
        report.check(verify.status != "ERROR", f"rollout {rid}: verify span status is ERROR")
        report.check(
            verify.trace_id == dispatch.trace_id,
            f"rollout {rid}: verify span is in trace {verify.trace_id}, its dispatch in {dispatch.trace_id}",
        )
        chain = _ancestry(verify, spans_by_id)
        report.check(
            dispatch in chain,
            f"rollout {rid}: verify span is not a descendant of its dispatch span "
            f"(ancestry: {' <- '.join(s.name for s in chain)})",
        )
        reward = verify.attributes.get(REWARD)
        if rollout.reward is None:
            report.check(REWARD not in verify.attributes, f"rollout {rid}: unscored in rollouts.jsonl, yet {REWARD}={reward!r}")
        else:
            report.check(
                isinstance(reward, float) and math.isclose(reward, rollout.reward, rel_tol=0.0, abs_tol=1e-12),
                f"rollout {rid}: {REWARD}={reward!r}, rollouts.jsonl says {rollout.reward!r}",
            )
    return matched


def is_model_call(span: Span) -> bool:
    return span.kind == "CLIENT" and GEN_AI_OPERATION in span.attributes


def check_model_calls(
    rollouts: list[Rollout], received: Received, model_requests: list[dict[str, Any]], dispatches: dict[str, Span], report: Report
) -> None:
    """Per rollout: as many model-call spans as the model API got requests for it (by their baggage),
    each in its dispatch's trace and a descendant of its dispatch span across the hops."""
    spans_by_id = {span.span_id: span for span in received.spans}
    calls = [span for span in received.spans if is_model_call(span)]
    report.spans_checked["model call"] += len(calls)
    report.check(len(calls) == len(model_requests), f"{len(calls)} model-call spans for {len(model_requests)} model requests")
    requested = Counter(_baggage_rollout_id(request.get("baggage")) for request in model_requests)
    grouped: dict[str, list[Span]] = defaultdict(list)
    for span in calls:
        grouped[str(span.attributes.get(ROLLOUT_ID))].append(span)
    for rollout in rollouts:
        rid = rollout.rollout_id
        found = grouped.get(rid, [])
        report.check(
            len(found) == requested.get(rid, 0) and bool(found),
            f"rollout {rid}: {len(found)} model-call spans, the model API got {requested.get(rid, 0)} requests for it",
        )
        dispatch = dispatches.get(rid)
        for span in found:
            report.check(span.kind == "CLIENT", f"rollout {rid}: model-call span kind is {span.kind}, not CLIENT")
            if dispatch is None:
                continue
            chain = _ancestry(span, spans_by_id)
            report.check(
                span.trace_id == dispatch.trace_id and dispatch in chain,
                f"rollout {rid}: model-call span {span.name!r} is not in its dispatch's trace under it "
                f"(ancestry: {' <- '.join(s.name for s in chain)})",
            )
    strangers = sorted(set(grouped) - {r.rollout_id for r in rollouts})
    report.check(not strangers, f"model-call spans name no rollout of the run: {strangers}")


def check_dispatch_totals(rollouts: list[Rollout], dispatches: dict[str, Span], report: Report) -> None:
    """Per rollout: the dispatch span's token totals are the usage NeMo Gym wrote in its output row,
    and its model-call count, where it has one, the number of model calls its row's trajectory lists."""
    with_totals = with_calls = 0
    for rollout in rollouts:
        rid = rollout.rollout_id
        dispatch = dispatches.get(rid)
        if dispatch is None:
            continue
        attrs = dispatch.attributes
        got = (attrs.get(INPUT_TOKENS), attrs.get(OUTPUT_TOKENS))
        expected = rollout.usage if rollout.usage is not None else (None, None)
        report.check(got == expected, f"rollout {rid}: dispatch token totals {got}, its output row's usage says {expected}")
        # Only where the /run result itself lists the calls: 0.7.0's collector adds the captured
        # trajectory to the row after it read the result, and simple_agent's result lists none.
        if MODEL_CALLS in attrs:
            with_calls += 1
            report.check(
                attrs.get(MODEL_CALLS) == rollout.model_calls,
                f"rollout {rid}: {MODEL_CALLS}={attrs.get(MODEL_CALLS)!r}, its row's trajectory lists {rollout.model_calls}",
            )
        with_totals += got != (None, None)
    report.notes.append(f"dispatches with token totals: {with_totals} of {len(rollouts)}, with {MODEL_CALLS}: {with_calls}")


def check_health_spans(
    rollouts: list[Rollout],
    verdict_rows: list[dict[str, Any]],
    dispatches: dict[str, Span],
    received: Received,
    expected_verdicts: frozenset[str],
    report: Report,
) -> None:
    """Per rollout: one health span under its ended dispatch, with rollout_verdicts.jsonl's verdict and checks.

    Over the pass, every verdict in `expected_verdicts` must appear and no other, with one exception
    NeMo Gym itself explains: `unobserved` for a rollout whose row records the capture gap
    `model_call_capture_no_records` (0.7.0's collector sometimes reads a very short rollout's
    capture before the model server's record of it is there; its health pass then cannot observe it).
    """
    file_verdicts = {row.get("verdict") for row in verdict_rows}
    missing = sorted(set(expected_verdicts) - file_verdicts)
    report.check(not missing, f"rollout_verdicts.jsonl has no {missing} verdict; it has {sorted(map(str, file_verdicts))}")
    rows_by_key = {(row.get("_ng_task_index"), row.get("_ng_rollout_index")): row for row in verdict_rows}
    gaps = {(r.task_index, r.rollout_index): r.capture_gaps for r in rollouts}
    explained = []
    for key, row in sorted(rows_by_key.items(), key=str):
        verdict = row.get("verdict")
        if verdict in expected_verdicts:
            continue
        if verdict == "unobserved" and CAPTURE_NO_RECORDS in gaps.get(key, ()):
            explained.append(row.get("rollout_id"))
        else:
            report.fail(
                f"rollout {row.get('rollout_id')}: verdict {verdict!r}, this pass allows only {sorted(expected_verdicts)}"
            )
    if explained:
        report.notes.append(f"unobserved because NeMo Gym recorded {CAPTURE_NO_RECORDS} for them: {explained}")
    report.check(
        len(rows_by_key) == len(verdict_rows) == len(rollouts),
        f"rollout_verdicts.jsonl has {len(verdict_rows)} rows ({len(rows_by_key)} distinct rollouts) "
        f"for {len(rollouts)} rollouts",
    )
    healths = _one_per_rollout(rollouts, received, HEALTH_SPAN, report)
    for rollout in rollouts:
        rid = rollout.rollout_id
        row = rows_by_key.get((rollout.task_index, rollout.rollout_index))
        if not report.check(row is not None, f"rollout {rid}: no row in rollout_verdicts.jsonl"):
            continue
        found = healths.get(rid, [])
        if not report.check(len(found) == 1, f"rollout {rid}: expected 1 `{HEALTH_SPAN}`, got {len(found)}"):
            continue
        health = found[0]
        dispatch = dispatches.get(rid)
        if dispatch is not None:
            report.check(
                health.trace_id == dispatch.trace_id and health.parent_span_id == dispatch.span_id,
                f"rollout {rid}: health span (trace {health.trace_id}, parent {health.parent_span_id}) is not a child "
                f"of its dispatch (trace {dispatch.trace_id}, span {dispatch.span_id})",
            )
            report.check(health.start_ns >= dispatch.end_ns, f"rollout {rid}: health span starts before its dispatch ended")
        report.check(health.kind == "INTERNAL", f"rollout {rid}: health span kind is {health.kind}, not INTERNAL")
        report.check(
            health.attributes.get(VERDICT) == row.get("verdict"),
            f"rollout {rid}: {VERDICT}={health.attributes.get(VERDICT)!r}, rollout_verdicts.jsonl says {row.get('verdict')!r}",
        )
        expected_checks = sorted({finding["check"] for finding in row.get("findings") or []})
        report.check(
            list(health.attributes.get(CHECKS, ())) == expected_checks,
            f"rollout {rid}: {CHECKS}={health.attributes.get(CHECKS)!r}, "
            f"rollout_verdicts.jsonl's findings give {expected_checks}",
        )


def check_verdicts_counter(received: Received, report: Report) -> None:
    """`gym.rollout.verdicts` (delta, summed over processes) counts the health spans by verdict."""
    spans = Counter(str(s.attributes.get(VERDICT)) for s in received.spans if s.name == HEALTH_SPAN)
    counted: Counter[str] = Counter()
    for point in received.metric_points:
        if point.name == VERDICTS_COUNTER:
            counted[str(point.attributes.get("verdict"))] += int(point.value or 0)
    report.notes.append(f"{VERDICTS_COUNTER}: {dict(counted)} (health spans by verdict: {dict(spans)})")
    report.check(counted == spans, f"`{VERDICTS_COUNTER}` counts {dict(counted)}, the health spans say {dict(spans)}")


def rewarded_counter_total(received: Received, report: Report) -> float | None:
    points = [p for p in received.metric_points if p.name == REWARDED_COUNTER]
    if not points:
        return None
    cumulative = [p for p in points if p.temporality != "DELTA"]
    if cumulative:
        report.fail(f"`{REWARDED_COUNTER}` arrived with {cumulative[0].temporality} temporality; the run asks for DELTA")
        return None
    return float(sum(p.value or 0 for p in points))


def check_rewarded_counter(received: Received, report: Report) -> None:
    rewarded_spans = sum(1 for s in received.spans if s.name == VERIFY_SPAN and REWARD in s.attributes)
    total = rewarded_counter_total(received, report)
    report.notes.append(f"{REWARDED_COUNTER}: {total} (verify spans with a reward: {rewarded_spans})")
    if total is None:
        report.fail(f"no `{REWARDED_COUNTER}` metric points arrived at the receiver")
        return
    report.check(
        total == rewarded_spans,
        f"`{REWARDED_COUNTER}` adds up to {total}, but {rewarded_spans} verify spans carry a reward",
    )


def _baggage_rollout_id(header: str | None) -> str | None:
    for member in (header or "").split(","):
        key, _, value = member.strip().partition("=")
        if unquote(key.strip()) == ROLLOUT_ID:
            return unquote(value.split(";", 1)[0].strip())
    return None


def check_model_baggage(rollouts: list[Rollout], model_requests: list[dict[str, Any]], report: Report) -> None:
    """The rollout id reaches the model API as W3C baggage, on every model call."""
    expected_ids = {r.rollout_id for r in rollouts}
    seen = [_baggage_rollout_id(request.get("baggage")) for request in model_requests]
    without = sum(1 for rollout_id in seen if rollout_id is None)
    report.notes.append(f"model requests: {len(model_requests)}, carrying {ROLLOUT_ID} baggage: {len(seen) - without}")
    report.check(bool(model_requests), "the model server received no requests")
    report.check(without == 0, f"{without} of {len(model_requests)} model requests carried no `{ROLLOUT_ID}` baggage")
    strangers = sorted({rid for rid in seen if rid is not None} - expected_ids)
    report.check(not strangers, f"model requests carried unknown rollout ids in baggage: {strangers}")
    missing = sorted(expected_ids - set(seen))
    report.check(not missing, f"no model request carried the baggage of rollouts {missing}")


def check_one_traceparent(model_requests: list[dict[str, Any]], report: Report) -> None:
    """Every model request carries exactly one `traceparent` header: never two (contrib's and the package's)."""
    counts = [request.get("traceparents") for request in model_requests if request.get("kind") != "failed"]
    wrong = sorted({count for count in counts if count != 1}, key=str)
    report.check(not wrong, f"model requests carried {wrong} `traceparent` headers (expected exactly 1 each)")


def check_no_client_spans(received: Received, report: Report) -> None:
    """Without contrib: no CLIENT span but the package's model calls (it makes none for a hop), and no contrib HTTP span."""
    clients = sorted({span.name for span in received.spans if span.kind == "CLIENT" and GEN_AI_OPERATION not in span.attributes})
    report.check(not clients, f"CLIENT spans without any HTTP client instrumentation: {clients}")
    internal = sorted({span.name for span in received.spans if span.name in ("http send", "http receive")})
    report.check(not internal, f"contrib's ASGI spans without contrib: {internal}")


def check_only_package_spans(received: Received, report: Report) -> None:
    """FastAPI's own telemetry off (``OTEL_PYTHON_GYM_SERVER_TELEMETRY=false``), contrib absent: every
    span received is the package's (dispatch, verify, health, model call), FastAPI's server spans gone."""
    package_spans = (DISPATCH_SPAN, VERIFY_SPAN, HEALTH_SPAN)
    others = Counter(span.name for span in received.spans if span.name not in package_spans and not is_model_call(span))
    report.check(not others, f"spans not the package's with FastAPI's own telemetry off: {dict(others)}")


_ROLLOUT_PREFIX = re.compile(r"^/ng-rollout/[^/]+")


def _server_path(span: Span) -> str | None:
    """The path a server span handled, without NeMo Gym's `/ng-rollout/<id>` prefix (observability on)."""
    target = span.attributes.get("url.path") or span.attributes.get("http.target")
    if span.kind != "SERVER" or not isinstance(target, str):
        return None
    return _ROLLOUT_PREFIX.sub("", target.split("?", 1)[0])


def check_http_propagation(rollouts: list[Rollout], received: Received, flat_run_hops: int, report: Report) -> None:
    """Without any gym span: each rollout's `/run` hops and its `/verify` share one trace, its own.

    A flat row's rollout is `flat_run_hops` `/run` requests (0.7.0: the environment server's, then
    the agent's it relays to); a native episode is one (its environment server's).
    """
    run_spans = [s for s in received.spans if _server_path(s) == "/run"]
    verify_spans = [s for s in received.spans if _server_path(s) == "/verify"]
    expected_runs = sum(1 if rollout.native else flat_run_hops for rollout in rollouts)
    report.notes.append(f"HTTP server spans: /run {len(run_spans)}, /verify {len(verify_spans)}")
    report.check(len(run_spans) == expected_runs, f"expected {expected_runs} `/run` server spans, got {len(run_spans)}")
    report.check(len(verify_spans) == len(rollouts), f"expected {len(rollouts)} `/verify` server spans, got {len(verify_spans)}")
    run_traces = {span.trace_id for span in run_spans}
    report.check(
        len(run_traces) == len(rollouts),
        f"the `/run` server spans are in {len(run_traces)} traces, expected one per rollout ({len(rollouts)})",
    )
    orphans = sum(1 for s in verify_spans if s.trace_id not in run_traces)
    report.check(orphans == 0, f"{orphans} `/verify` server spans are in no rollout's trace (context was not propagated)")


def check_no_leaked_request_context(received: Received, report: Report) -> None:
    """No request handled inside an earlier, already-ended request's context.

    uvicorn starts a request that arrives on a keep-alive connection before the previous
    response completed from inside the previous request's task, which copies its context
    (CPython issue 140947). The ASGI middleware then sees a current span, makes the new
    request an INTERNAL child of the ended one and ignores its `traceparent` and `baggage`:
    the rollout is attributed to another rollout's trace and id.
    """
    spans_by_id = {span.span_id: span for span in received.spans}
    leaked = []
    for span in received.spans:
        parent = spans_by_id.get(span.parent_span_id)
        if (
            span.kind == "INTERNAL"
            and parent is not None
            and parent.kind == "SERVER"
            and span.name == parent.name
            and span.start_ns >= parent.end_ns
        ):
            gap_ms = (span.start_ns - parent.end_ns) / 1e6
            leaked.append(f"{span.name} (trace {span.trace_id}, started {gap_ms:.2f} ms after its parent ended)")
    report.check(
        not leaked,
        f"{len(leaked)} request(s) ran inside an earlier request's ended server span, ignoring their own "
        f"traceparent/baggage (context leaked across keep-alive requests in uvicorn): {leaked}",
    )


def excerpt_lines(rollouts: list[Rollout], received: Received) -> list[str]:
    """One rollout's path from dispatch to verify (and a model call, and its health span), as real spans trimmed to names,
    ids and gym attributes."""
    spans_by_id = {span.span_id: span for span in received.spans}
    unhealthy = {s.attributes.get(ROLLOUT_ID) for s in received.spans if s.name == HEALTH_SPAN and s.attributes.get(CHECKS)}
    # Best shown: a flat row with a task id and, where there are verdicts, one with failed checks.
    preferred = sorted(rollouts, key=lambda r: (r.native, r.expected_task_id is None, r.rollout_id not in unhealthy))
    for rollout in preferred:
        named = [s for s in received.spans if s.attributes.get(ROLLOUT_ID) == rollout.rollout_id]
        dispatch = next((s for s in named if s.name == DISPATCH_SPAN), None)
        verify = next((s for s in named if s.name == VERIFY_SPAN), None)
        if dispatch is None or verify is None:
            continue
        chain = _ancestry(verify, spans_by_id)
        if dispatch not in chain:
            continue
        path = list(reversed(chain[: chain.index(dispatch) + 1]))
        model_call = next((s for s in named if is_model_call(s)), None)
        if model_call is not None:
            calls = list(reversed(_ancestry(model_call, spans_by_id)))
            path += [s for s in calls[calls.index(dispatch) + 1 :] if s not in path] if dispatch in calls else []
        path += [s for s in named if s.name == HEALTH_SPAN and s.parent_span_id == dispatch.span_id]
        break
    else:
        return []
    lines = []
    for span in path:
        trimmed: dict[str, Any] = {
            "name": span.name,
            "kind": span.kind,
            "traceId": span.trace_id,
            "spanId": span.span_id,
            "parentSpanId": span.parent_span_id,
        }
        url = span.attributes.get("url.full") or span.attributes.get("http.url")
        if span.kind == "CLIENT" and isinstance(url, str):
            trimmed["http.url"] = url
        gym_attributes = {k: v for k, v in span.attributes.items() if k.startswith(("nemo.gym.", "gen_ai."))}
        if gym_attributes:
            trimmed["attributes"] = gym_attributes
        lines.append(json.dumps(trimmed))
    return lines


def check_report_of_files(command: Path, folder: Path, rollouts: list[Rollout], work: Path, report: Report) -> None:
    """`gym-instrument report FOLDER` of the per-process span files (docs/nemo-gym.md's setup): one
    file per process, and the report's rollouts, scored rollouts, mean reward and token totals
    are those of the output rows, computed here from the rows."""
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    report.check(len(files) >= 2, f"{folder}: {len(files)} span files; every process should write its own")
    log_path = work / "report_of_files.json"
    with log_path.open("w") as out:
        arguments = ["--format", "json", "--no-html", "--no-progress", "--max-infra-failures", "100%"]
        completed = subprocess.run(
            [str(command), "report", str(folder), *arguments],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    if completed.returncode != 0:
        report.fail(f"gym-instrument report {folder} exited {completed.returncode}: {completed.stderr.strip()[-2000:]}")
        return
    figures = json.loads(log_path.read_text())
    run, tokens = figures["run"], figures["tokens"]
    rewards = [r.reward for r in rollouts if r.reward is not None]
    usage = [r.usage for r in rollouts if r.usage is not None]
    expected = {
        "rollouts": len(rollouts),
        "scored": len(rewards),
        "mean reward": round(sum(rewards) / len(rewards), 9) if rewards else None,
        "input tokens": sum(u[0] for u in usage),
        "output tokens": sum(u[1] for u in usage),
    }
    got = {
        "rollouts": run["rollouts"],
        "scored": run["scored"],
        "mean reward": round(run["mean_reward"], 9) if run["mean_reward"] is not None else None,
        "input tokens": tokens["input_tokens"],
        "output tokens": tokens["output_tokens"],
    }
    report.check(got == expected, f"the report of {folder} says {got}; the output rows say {expected}")
    report.notes.append(f"report of {len(files)} per-process span files: {got}")
