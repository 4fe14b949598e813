"""One join, then one decision per rollout: the cases where reading order, a lost dispatch, a failure
kind, a mask or a rollout id's form used to change what the report says.

The spans are made by the real SDK in "processes" (one tracer provider each, with its resource)
that export through the package's ``gym_json_file`` exporter into a file each, as a run's
processes do; the report is the installed ``gym-instrument`` command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from gym_instrument import semconv
from gym_instrument.tools.export import JsonFileSpanExporter

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
T0 = 1_796_000_000_000_000_000


class Process:
    """A process of the run: its tracer, exporting each span as it ends to its own span file."""

    def __init__(self, path: Path, name: str) -> None:
        self.path = path
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}), shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(JsonFileSpanExporter(path)))
        self.tracer = self.provider.get_tracer(semconv.INSTRUMENTATION_NAME)

    def span(self, name: str, attributes: dict[str, Any], start: int, parent: Any = None, error: str | None = None) -> Any:
        span = self.tracer.start_span(name, context=parent, attributes=attributes, start_time=start)
        if error is not None:
            span.set_attribute(semconv.ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR))
        return span


def under(span: Any) -> Any:
    """The context of a span as its child in another process sees it (same trace, remote parent)."""
    context = span.get_span_context()
    return trace.set_span_in_context(NonRecordingSpan(SpanContext(context.trace_id, context.span_id, True, TraceFlags(1))))


def in_another_process(span: Any, server_span_id: int) -> Any:
    """A context in ``span``'s trace whose parent is another process's server span."""
    context = span.get_span_context()
    return trace.set_span_in_context(NonRecordingSpan(SpanContext(context.trace_id, server_span_id, True, TraceFlags(1))))


def verify(process: Process, parent: Any, rollout_id: str | None, start: int, **result: Any) -> None:
    attributes: dict[str, Any] = {} if rollout_id is None else {semconv.ROLLOUT_ID: rollout_id}
    names = {
        "reward": semconv.ROLLOUT_REWARD,
        "rule": semconv.REWARD_RULE,
        "masked": semconv.VERIFY_MASKED,
        "kind": semconv.FAILURE_KIND,
    }
    attributes.update({names[key]: value for key, value in result.items()})
    process.span(semconv.SPAN_VERIFY, attributes, start, parent).end(end_time=start + 1000)


def report(*paths: Path, code: int | None = 0, options: tuple[str, ...] = ()) -> dict[str, Any]:
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "report", *map(str, paths), "--no-html", "--format", "json", *options],
        capture_output=True,
        text=True,
    )
    if code is not None:
        assert process.returncode == code, process.stderr
    return json.loads(process.stdout)  # type: ignore[no-any-return]


def test_a_dispatch_read_between_its_verifies_is_scored_once_by_its_rule(tmp_path: Path) -> None:
    """Rule max, steps 0.0 / 1.0 / 0.0 verified in two environment processes; the collector's file in between."""
    first_env, collector, second_env = (Process(tmp_path / f"{n}.jsonl", n) for n in ("env-1", "collector", "env-2"))
    identity = {semconv.TASK_ID: "t", semconv.TASK_INDEX: 0, semconv.ROLLOUT_REPEAT: 0, semconv.ROLLOUT_ID: "0-0"}
    dispatch = collector.span(semconv.SPAN_DISPATCH, identity, T0)
    verify(first_env, in_another_process(dispatch, 11), "0-0", T0 + 10, reward=0.0, rule="max")
    verify(second_env, in_another_process(dispatch, 12), "0-0", T0 + 20, reward=1.0, rule="max")
    verify(second_env, in_another_process(dispatch, 13), "0-0", T0 + 30, reward=0.0, rule="max")
    dispatch.end(end_time=T0 + 100)
    files = [first_env.path, collector.path, second_env.path]
    for order in (files, files[::-1], [collector.path, *files[::2]]):
        figures = report(*order)
        (task,) = figures["tasks"]
        assert (task["mean_reward"], task["scored"], task["successes"]) == (1.0, 1, 1), order
        assert figures["run"]["rollouts_without_dispatch"] == 0


def test_a_failure_kind_on_a_step_that_does_not_decide_is_not_a_failure(tmp_path: Path) -> None:
    """Rule max: an early step failed its environment (failure kind, reward 0), a later one scored 1.0."""
    collector = Process(tmp_path / "spans.jsonl", "collector")
    dispatch = collector.span(semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "r"}, T0)
    parent = trace.set_span_in_context(dispatch)
    verify(collector, parent, "r", T0 + 10, reward=0.0, kind="env_setup_failed", rule="max")
    verify(collector, parent, "r", T0 + 20, reward=1.0, rule="max")
    dispatch.end(end_time=T0 + 100)
    figures = report(collector.path, code=0)  # not over the 5 % limit: no infrastructure failure at all
    infra = figures["infra_failures"]
    assert (infra["failures"], infra["share"], infra["over_limit"]) == (0, 0.0, False)
    assert (figures["run"]["successes"], figures["run"]["mean_reward"], figures["run"]["infra_failures"]) == (1, 1.0, 0)
    # Rule last, the same steps the other way round: the deciding step names the kind, and the rollout is a failure only.
    collector = Process(tmp_path / "last.jsonl", "collector")
    dispatch = collector.span(semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "r"}, T0)
    parent = trace.set_span_in_context(dispatch)
    verify(collector, parent, "r", T0 + 10, reward=1.0)
    verify(collector, parent, "r", T0 + 20, reward=0.0, kind="env_setup_failed")
    dispatch.end(end_time=T0 + 100)
    figures = report(collector.path, code=4)
    assert figures["infra_failures"]["kinds"] == {"env_setup_failed": 1}
    assert (figures["run"]["scored"], figures["run"]["scored_zero"], figures["run"]["mean_reward"]) == (0, 0, None)


def test_a_multi_step_rollout_whose_dispatch_was_not_read_is_one_rollout(tmp_path: Path) -> None:
    environment = Process(tmp_path / "env.jsonl", "env")
    collector = Process(tmp_path / "collector.jsonl", "collector")
    lost = Process(tmp_path / "lost.jsonl", "collector-2")  # its file is not read
    dispatch = collector.span(semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "a"}, T0)
    verify(environment, in_another_process(dispatch, 7), "a", T0 + 10, reward=1.0, rule="sum")
    dispatch.end(end_time=T0 + 100)
    missing = lost.span(semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "b"}, T0)
    for step, reward in enumerate((0.5, 1.0, 0.25)):  # sum 1.75, max 1.0, last 0.25, first 0.5
        verify(environment, in_another_process(missing, 20 + step), "b", T0 + 10 * step, reward=reward, rule="sum")
    missing.end(end_time=T0 + 100)
    figures = report(environment.path, collector.path)
    run = figures["run"]
    assert (run["rollouts_without_dispatch"], run["rollouts_without_dispatch_scored"]) == (1, 1)
    assert (run["rollouts"], run["scored"], run["mean_reward"]) == (1, 1, 1.0)  # the lost one is in no figure


@pytest.mark.parametrize(
    ("rollout_ids", "template"),
    [(["weather-r0", "weather-r1"], True), (["ep-7f3a", "ep-91c2"], False), (["0-0", "0-1"], False)],
)
def test_a_verdict_finds_its_task_whatever_the_id_form(tmp_path: Path, rollout_ids: list[str], template: bool) -> None:
    """A template's ids (``{task_id}-r{repeat}``), OpenEnv-style episode ids and the index form alike."""
    collector, health = Process(tmp_path / "collector.jsonl", "collector"), Process(tmp_path / "health.jsonl", "health")
    dispatches = []
    for repeat, rollout_id in enumerate(rollout_ids):
        identity = {semconv.TASK_ID: "weather", semconv.ROLLOUT_REPEAT: repeat, semconv.ROLLOUT_ID: rollout_id}
        if not template:
            identity[semconv.TASK_INDEX] = 0
        dispatch = collector.span(semconv.SPAN_DISPATCH, identity, T0 + repeat)
        verify(collector, trace.set_span_in_context(dispatch), rollout_id, T0 + 10, reward=1.0)
        dispatch.end(end_time=T0 + 100)
        dispatches.append(dispatch)
    judged = {semconv.ROLLOUT_ID: rollout_ids[1], semconv.HEALTH_VERDICT: "unhealthy", semconv.HEALTH_CHECKS: ["hollow"]}
    health.span(semconv.SPAN_HEALTH, judged, T0 + 200, under(dispatches[1])).end(end_time=T0 + 200)
    figures = report(collector.path, health.path)
    (task,) = figures["tasks"]
    assert (task["task"], task["unhealthy"], task["unhealthy_rate"]) == ("weather", 1, 0.5)
    (listed,) = figures["health"]["unhealthy"]
    assert (listed["task"], listed["rollout_id"], listed["reward"], listed["checks"]) == (
        "weather",
        rollout_ids[1],
        1.0,
        ["hollow"],
    )
    (flagged,) = figures["reward_health"]["succeeded_unhealthy"]
    assert flagged["task"] == "weather"


def test_rollouts_mean_one_thing_in_every_table(tmp_path: Path) -> None:
    """A task with a failed dispatch never retried, and one that succeeded: 2 rollouts everywhere."""
    collector = Process(tmp_path / "spans.jsonl", "collector")
    for repeat, error in enumerate(("aiohttp.ServerDisconnectedError", None)):
        rollout_id = f"0-{repeat}"
        identity = {semconv.TASK_ID: "t", semconv.TASK_INDEX: 0, semconv.ROLLOUT_REPEAT: repeat, semconv.ROLLOUT_ID: rollout_id}
        dispatch = collector.span(semconv.SPAN_DISPATCH, identity, T0 + repeat, error=error)
        if error is None:
            verify(collector, trace.set_span_in_context(dispatch), rollout_id, T0 + 10, reward=1.0)
        dispatch.end(end_time=T0 + 100)
    figures = report(collector.path, code=4)
    (task,) = figures["tasks"]
    assert task["rollouts"] == task["infra_failures"]["rollouts"] == figures["infra_failures"]["rollouts"] == 2
    assert (task["failed"], task["scored"], task["infra_failures"]["failures"]) == (1, 1, 1)
    assert figures["retries"]["still_failed"] == 0 and figures["retries"]["chains"] == []  # never retried: not a retry
    text = subprocess.run([str(GYM_INSTRUMENT), "report", str(collector.path), "--no-html"], capture_output=True, text=True)
    assert "retries:" not in text.stdout and "still failed" not in text.stdout


@pytest.mark.parametrize("rule", [None, *semconv.REWARD_RULES])
def test_a_masked_verify_is_never_scored_whatever_reward_it_carries(tmp_path: Path, rule: str | None) -> None:
    collector = Process(tmp_path / "spans.jsonl", "collector")
    dispatch = collector.span(semconv.SPAN_DISPATCH, {semconv.TASK_ID: "t", semconv.ROLLOUT_ID: "r"}, T0)
    extra = {} if rule is None else {"rule": rule}
    verify(collector, trace.set_span_in_context(dispatch), "r", T0 + 10, reward=0.7, masked=True, **extra)
    dispatch.end(end_time=T0 + 100)
    figures = report(collector.path, code=4)
    (task,) = figures["tasks"]
    assert (task["scored"], task["masked"], task["mean_reward"]) == (0, 1, None)
    assert figures["infra_failures"]["kinds"] == {"masked": 1}
    assert figures["rewards"]["values"] == {} and figures["rewards"]["masked"] == 1
