"""``gym-instrument replay``: real NeMo Gym output files become the spans the live instrumentation makes.

The runs are the shared samples (``shared/nemo_gym_samples/``: NeMo Gym 0.5.1 rows, its health
pass's verdicts) and a NeMo Gym 0.7.0-shaped run made from them (latencies, dataset fields only in
the materialized inputs, a failed first attempt). The spans are read back from what the exporter
wrote, and compared with what the live instrumentation makes of the same rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gym_instrument
from gym_instrument.frameworks.nemo_gym.schema import SCHEMA as NEMO_GYM
from gym_instrument.tools.replay import replay
from gym_instrument.tools.report import build_report
from gym_instrument.tools.report.otlp import ReadStats, Span, read_spans
from tests.otlp_receiver import OtlpReceiver

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "nemo_gym_samples"
if not SAMPLES.is_dir():
    SAMPLES = Path("/work/shared/nemo_gym_samples")
GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
REPLAY_KEYS = ("gym.replayed", "gym.replay.timing")

pytestmark = pytest.mark.skipif(not SAMPLES.is_dir(), reason="the shared NeMo Gym samples are not beside the repository")


def rows(path: Path) -> list[dict[str, Any]]:
    parsed = []
    for line in path.read_text().splitlines():
        try:
            parsed.append(json.loads(line))
        except ValueError:
            continue
    return parsed


def replay_cli(run_dir: Path, output: Path, **environment: str) -> str:
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "replay", str(run_dir), "--output", str(output)],
        capture_output=True,
        text=True,
        env={**os.environ, **environment},
    )
    assert process.returncode == 0, process.stderr
    return process.stdout


def spans_in(path: Path) -> list[Span]:
    return list(read_spans([path], ReadStats(), progress=False))


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    grouped: dict[str, list[Span]] = {}
    for span in spans:
        grouped.setdefault(span.name, []).append(span)
    return grouped


def test_replay_of_a_run_makes_dispatch_verify_and_health_spans(tmp_path: Path) -> None:
    run_dir = SAMPLES / "mcqa_run"
    output = tmp_path / "spans.jsonl"
    said = replay_cli(run_dir, output)
    assert "replayed 6 dispatches (0 failed), 6 verify and 6 health spans" in said
    spans = by_name(spans_in(output))
    assert {name: len(found) for name, found in spans.items()} == {
        "gym.rollout.dispatch": 6,
        "gym.verify": 6,
        "gym.rollout.health": 6,
    }
    output_rows = {(row["_ng_task_index"], row["_ng_rollout_index"]): row for row in rows(run_dir / "mcqa_rollouts.jsonl")}
    dispatches = {span.attributes["nemo.gym.rollout.id"]: span for span in spans["gym.rollout.dispatch"]}
    assert len({span.trace_id for span in dispatches.values()}) == 6  # one trace per rollout
    for (task_index, repeat), row in output_rows.items():
        dispatch = dispatches[f"{task_index}-{repeat}"]
        assert dispatch.parent_span_id is None
        assert dispatch.attributes == {
            "nemo.gym.rollout.repeat": repeat,
            "nemo.gym.task.index": task_index,
            "nemo.gym.rollout.id": f"{task_index}-{repeat}",
            "nemo.gym.agent.name": "mcqa_simple_agent",
            # As live: the rollout's token totals, from the usage NeMo Gym wrote in its row.
            "gen_ai.usage.input_tokens": row["response"]["usage"]["input_tokens"],
            "gen_ai.usage.output_tokens": row["response"]["usage"]["output_tokens"],
            "gym.replayed": True,
            "gym.replay.timing": "placeholder",  # 0.5.1 rows carry no latency
        }
        assert dispatch.start_ns == dispatch.end_ns == int(row["response"]["created_at"] * 1e9)
    for verify in spans["gym.verify"]:
        dispatch = dispatches[verify.attributes["nemo.gym.rollout.id"]]
        assert (verify.trace_id, verify.parent_span_id) == (dispatch.trace_id, dispatch.span_id)
        row = output_rows[(dispatch.attributes["nemo.gym.task.index"], dispatch.attributes["nemo.gym.rollout.repeat"])]
        assert verify.attributes["nemo.gym.rollout.reward"] == row["reward"]
    for health in spans["gym.rollout.health"]:
        dispatch = dispatches[health.attributes["nemo.gym.rollout.id"]]
        assert (health.trace_id, health.parent_span_id) == (dispatch.trace_id, dispatch.span_id)
        assert health.attributes["nemo.gym.health.verdict"] == "unobserved"
        assert health.attributes["nemo.gym.health.checks"] == []
    assert all(
        span.resource["gym.replayed"] is True and span.resource["service.name"] == "gym-replay" for span in spans_in(output)
    )

    figures = build_report([output])
    assert figures["source"]["replayed_spans"] == 18
    assert [task["task"] for task in figures["tasks"]] == ["#0", "#1", "#2"]
    for task in figures["tasks"]:
        rewards = [row["reward"] for (t, _), row in output_rows.items() if t == task["task_index"]]
        assert task["scored"] == 2 and task["mean_reward"] == pytest.approx(sum(rewards) / 2)
    assert figures["run"]["zero_variance_groups"] == 1  # task 2: both repeats scored 0
    assert figures["health"]["verdicts"] == {"unobserved": 6}
    assert figures["time"]["measured"] == 0 and figures["time"]["without_duration"] == 6


def test_replay_of_a_health_pass_puts_each_verdict_under_its_rollout(tmp_path: Path) -> None:
    run_dir = SAMPLES / "health_crafted"
    output = tmp_path / "spans.jsonl"
    said = replay_cli(run_dir, output)
    # Line 13 of the rollouts file is not JSON: no rollout; its verdict (record_unreadable) names no replayed rollout.
    assert (
        "replayed 12 dispatches" in said
        and "1 unreadable lines skipped" in said
        and "1 verdicts name no replayed rollout" in said
    )
    spans = by_name(spans_in(output))
    dispatches = {span.span_id: span for span in spans["gym.rollout.dispatch"]}
    assert len(spans["gym.rollout.health"]) == 12
    verdicts = {row["rollout_id"]: row for row in rows(run_dir / "rollout_verdicts.jsonl")}
    for health in spans["gym.rollout.health"]:
        dispatch = dispatches[health.parent_span_id]
        assert dispatch.trace_id == health.trace_id
        rollout_id = health.attributes["nemo.gym.rollout.id"]
        assert rollout_id == dispatch.attributes["nemo.gym.rollout.id"]
        verdict = verdicts[rollout_id]
        assert health.attributes["nemo.gym.health.verdict"] == verdict["verdict"]
        assert health.attributes["nemo.gym.health.checks"] == sorted({finding["check"] for finding in verdict["findings"]})
    explicit = next(span for span in spans["gym.rollout.health"] if span.attributes["nemo.gym.rollout.id"] == "my-explicit-id")
    assert dispatches[explicit.parent_span_id].attributes["nemo.gym.rollout.repeat"] == 1
    figures = build_report([output])
    assert figures["health"]["verdicts"] == {"unhealthy": 9, "healthy": 2, "unobserved": 1}
    assert figures["health"]["checks"][:2] == [
        {"check": "model_call_failed", "rollouts": 2},
        {"check": "rollout_token_count_mismatch", "rollouts": 2},
    ]
    assert sorted(item["rollout_id"] for item in figures["health"]["unhealthy"]) == [
        "1-0", "1-1", "2-0", "2-1", "3-0", "3-1", "4-0", "4-1", "5-1",
    ]  # fmt: skip


def live_spans(instrument: Any, telemetry: Any, run_dir: Path, rollouts_name: str, materialized_name: str | None) -> list[Any]:
    """What the live instrumentation makes of the same run: each dispatched row, its verify, the health pass."""
    instrument(targets=[])

    @gym_instrument.verify(schema=NEMO_GYM)
    def verify(body: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        return result

    @gym_instrument.dispatch(schema=NEMO_GYM)
    def dispatch(row: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        body = {key: value for key, value in row.items() if not key.startswith("_ng_")}  # as NeMo Gym's request models drop them
        return verify(body, result)

    @gym_instrument.health(schema=NEMO_GYM)
    def run_health_checks(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return verdicts

    dispatched = {}
    if materialized_name:
        dispatched = {(row["_ng_task_index"], row["_ng_rollout_index"]): row for row in rows(run_dir / materialized_name)}
    for row in rows(run_dir / rollouts_name):
        dispatch(dispatched.get((row["_ng_task_index"], row["_ng_rollout_index"]), row), row)
    if (run_dir / "rollout_verdicts.jsonl").exists():
        run_health_checks(rows(run_dir / "rollout_verdicts.jsonl"))
    return telemetry.spans()  # type: ignore[no-any-return]


def facts(spans: list[Any], replayed: bool) -> Counter[tuple[str, str]]:
    """Each span as (name, its attributes without the replay marks), and whether its parent is the rollout's dispatch."""
    dispatch_ids = {span.context.span_id: span for span in spans if span.name == "gym.rollout.dispatch"}
    seen: Counter[tuple[str, str]] = Counter()
    for span in spans:
        attributes = {key: list(value) if isinstance(value, tuple) else value for key, value in span.attributes.items()}
        if replayed:
            assert all(attributes.pop(key) for key in REPLAY_KEYS)
        parent = dispatch_ids.get(span.parent.span_id) if span.parent is not None else None
        parent_rollout = parent.attributes.get("nemo.gym.rollout.id") if parent is not None else None
        seen[(span.name, json.dumps({**attributes, "parent": parent_rollout}, sort_keys=True))] += 1
    return seen


@pytest.mark.parametrize(
    ("sample", "rollouts_name", "materialized_name"),
    [
        ("mcqa_run", "mcqa_rollouts.jsonl", "mcqa_rollouts_materialized_inputs.jsonl"),
        ("tool_run", "tool_rollouts.jsonl", "tool_rollouts_materialized_inputs.jsonl"),
        ("health_crafted", "crafted_rollouts.jsonl", None),
    ],
)
def test_replayed_spans_are_the_live_spans(
    instrument: Any, telemetry: Any, sample: str, rollouts_name: str, materialized_name: str | None
) -> None:
    run_dir = SAMPLES / sample
    live = facts(live_spans(instrument, telemetry, run_dir, rollouts_name, materialized_name), replayed=False)
    exporter = InMemorySpanExporter()
    replay(run_dir, exporter=exporter)
    assert facts(list(exporter.get_finished_spans()), replayed=True) == live


def make_070_run(folder: Path) -> dict[str, Any]:
    """The mcqa sample in NeMo Gym 0.7.0's shape: no dataset fields in the output rows (task ids are in the
    materialized inputs), ng_perf latencies, and rollout 0-0 failed once (failures sidecar) before its retry."""
    source = SAMPLES / "mcqa_run"
    folder.mkdir()
    latencies = {}
    task_ids = {0: "genetics-cf", 1: "genetics-hd", 2: 7}  # an int task id is rendered with str()
    with open(folder / "rollouts.jsonl", "w") as out:
        for number, row in enumerate(rows(source / "mcqa_rollouts.jsonl")):
            key = (row["_ng_task_index"], row["_ng_rollout_index"])
            latencies[key] = 1000.0 + 250.0 * number
            row = {key_: value for key_, value in row.items() if key_ not in ("expected_answer", "extracted_answer")}
            row["ng_perf"] = {"num_turns": 1, "total_latency_ms": latencies[key]}
            if key == (0, 0):
                row["_ng_attempt_index"] = 1
            out.write(json.dumps(row) + "\n")
    with open(folder / "rollouts_materialized_inputs.jsonl", "w") as out:
        for row in rows(source / "mcqa_rollouts_materialized_inputs.jsonl"):
            out.write(json.dumps({**row, "task_id": task_ids[row["_ng_task_index"]]}) + "\n")
    failure = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "agent_ref": {"name": "mcqa_simple_agent"},
        "_ng_failure_class": "agent_run_error",
    }
    (folder / "rollouts_failures.jsonl").write_text(json.dumps(failure) + "\n")
    shutil.copy(source / "rollout_verdicts.jsonl", folder / "rollout_verdicts.jsonl")  # names the retried rollout "0-0"
    return {"latencies": latencies, "task_ids": task_ids}


def test_replay_of_a_070_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    made = make_070_run(run_dir)
    output = tmp_path / "spans.jsonl"
    said = replay_cli(run_dir, output)
    assert "replayed 7 dispatches (1 failed), 6 verify and 6 health spans" in said
    assert "durations measured for 6, placeholders for 1" in said
    spans = by_name(spans_in(output))
    dispatches = {span.span_id: span for span in spans["gym.rollout.dispatch"]}
    for dispatch in dispatches.values():
        attributes = dispatch.attributes
        assert attributes["nemo.gym.task.id"] == str(made["task_ids"][attributes["nemo.gym.task.index"]])
        if dispatch.status_code == 2:
            assert attributes["error.type"] == "agent_run_error" and attributes["gym.replay.timing"] == "placeholder"
            continue
        latency = made["latencies"][(attributes["nemo.gym.task.index"], attributes["nemo.gym.rollout.repeat"])]
        assert (dispatch.end_ns - dispatch.start_ns) == int(latency * 1_000_000)
        assert attributes["gym.replay.timing"] == "measured"
    retried = next(span for span in spans["gym.rollout.health"] if span.attributes["nemo.gym.rollout.id"] == "0-0-a1")
    assert dispatches[retried.parent_span_id].attributes["nemo.gym.rollout.attempt"] == 1  # the verdict said "0-0"
    assert all(dispatches[span.parent_span_id].status_code != 2 for span in spans["gym.rollout.health"])

    figures = build_report([output])
    assert [task["task"] for task in figures["tasks"]] == ["genetics-cf", "genetics-hd", "7"]
    assert figures["errors"]["by_type"] == {"agent_run_error": 1}
    assert figures["tasks"][0]["rollouts"] == 2 and figures["tasks"][0]["errors"] == {"agent_run_error": 1}
    time = figures["time"]
    assert time["measured"] == 6 and time["without_duration"] == 1
    assert time["max_ms"] == pytest.approx(max(made["latencies"].values()))
    assert [item["duration_ms"] for item in time["slowest"]] == sorted(made["latencies"].values(), reverse=True)


def test_replay_through_the_exporter_the_environment_configures(tmp_path: Path) -> None:
    run_dir = SAMPLES / "mcqa_run"
    with OtlpReceiver() as receiver:
        process = subprocess.run(
            [str(GYM_INSTRUMENT), "replay", str(run_dir)],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_SERVICE_NAME": "replayed-mcqa",
            },
        )
        assert process.returncode == 0, process.stderr
        received = list(receiver.spans)  # exported before the command returned
    assert Counter(span["name"] for span in received) == {"gym.rollout.dispatch": 6, "gym.verify": 6, "gym.rollout.health": 6}
    assert {span["service"] for span in received} == {"replayed-mcqa"}
    assert all(span["attributes"]["gym.replayed"] is True for span in received)

    # OTEL_TRACES_EXPORTER=otlp_json_file writes to standard output: the report reads it as it is.
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "replay", str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "otlp_json_file"},
    )
    (tmp_path / "stdout.jsonl").write_text(process.stdout)
    figures = build_report([tmp_path / "stdout.jsonl"])
    assert figures["source"]["spans"] == 18 and figures["source"]["skipped_lines"] == 1  # the command's own summary line


def test_replay_finds_no_run_in_an_empty_folder(tmp_path: Path) -> None:
    process = subprocess.run([str(GYM_INSTRUMENT), "replay", str(tmp_path)], capture_output=True, text=True)
    assert process.returncode == 2 and "no rollouts file" in process.stderr


E2E_RUNS = Path(__file__).resolve().parent / "data" / "e2e_runs"  # what one real `make e2e` run wrote (copy_from_e2e.py)
E2E_RELEASES = ["nemo-gym-0.4.0", "nemo-gym-0.7.0"]
# The recorded live runs predate the dispatch's token totals (the e2e checks the live totals against
# the rows' usage); replayed, they are compared with the rows here, and left out of the comparison
# with the recorded live spans until those are refreshed (copy_from_e2e.py).
TOTALS = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "nemo.gym.rollout.model_calls")


def per_rollout(spans: list[Span]) -> dict[str, dict[str, Any]]:
    """Per rollout id: its dispatch's attributes, and what its verify and health spans in the same trace say."""
    dispatches = {span.span_id: span for span in spans if span.name == "gym.rollout.dispatch"}
    rollouts: dict[str, dict[str, Any]] = {}
    for dispatch in dispatches.values():
        rollout_id = dispatch.attributes["nemo.gym.rollout.id"]
        assert rollout_id not in rollouts, f"two dispatches of {rollout_id}"
        attributes = {key: value for key, value in dispatch.attributes.items() if key not in REPLAY_KEYS + TOTALS}
        rollouts[rollout_id] = {"dispatch": attributes, "verify": [], "health": []}
    for span in spans:
        if span.name == "gym.rollout.dispatch":
            continue
        rollout = rollouts[span.attributes["nemo.gym.rollout.id"]]
        dispatch = next(
            d for d in dispatches.values() if d.attributes["nemo.gym.rollout.id"] == span.attributes["nemo.gym.rollout.id"]
        )
        assert span.trace_id == dispatch.trace_id  # in the rollout's own trace (live: below the HTTP spans of /run and /verify)
        if span.name == "gym.verify":
            rollout["verify"].append(span.attributes.get("nemo.gym.rollout.reward"))
        else:
            assert span.parent_span_id == dispatch.span_id
            rollout["health"].append((span.attributes["nemo.gym.health.verdict"], span.attributes["nemo.gym.health.checks"]))
    return rollouts


@pytest.mark.parametrize("release", E2E_RELEASES)
def test_replay_of_a_real_e2e_run_makes_the_spans_the_live_run_made(tmp_path: Path, release: str) -> None:
    run_dir = E2E_RUNS / release
    output = tmp_path / "replayed.jsonl"
    replay_cli(run_dir, output)
    replayed_spans = spans_in(output)
    replayed = per_rollout(replayed_spans)
    live = per_rollout(spans_in(run_dir / "live_spans.otlp.jsonl"))
    assert replayed == live
    output_rows = rows(run_dir / "rollouts.jsonl")
    usage = {f"{row['_ng_task_index']}-{row['_ng_rollout_index']}": row["response"]["usage"] for row in output_rows}
    for dispatch in (span for span in replayed_spans if span.name == "gym.rollout.dispatch"):
        expected = usage[dispatch.attributes["nemo.gym.rollout.id"]]
        assert dispatch.attributes["gen_ai.usage.input_tokens"] == expected["input_tokens"]
        assert dispatch.attributes["gen_ai.usage.output_tokens"] == expected["output_tokens"]
    assert len(live) == len(output_rows) and all(len(rollout["verify"]) == 1 for rollout in live.values())
    assert sorted(reward for rollout in live.values() for reward in rollout["verify"]) == sorted(
        row["reward"] for row in output_rows
    )
    if (run_dir / "rollout_verdicts.jsonl").exists():  # 0.7.0 with model-call capture on: real verdicts
        assert Counter(rollout["health"][0][0] for rollout in live.values()) == {"healthy": 5, "unhealthy": 9}
    else:
        assert all(rollout["health"] == [] for rollout in live.values())


def comparable(figures: dict[str, Any]) -> dict[str, Any]:
    """The report's figures that do not depend on span ids or on how the durations were taken."""
    tasks = [
        # (tokens: see TOTALS)
        {
            key: value
            for key, value in task.items()
            if key not in ("example_trace_id", "mean_duration_ms", "p50_ms", "p95_ms", "tokens")
        }
        for task in figures["tasks"]
    ]
    unhealthy = sorted(
        (
            {key: value for key, value in item.items() if key not in ("trace_id", "span_id")}
            for item in figures["health"]["unhealthy"]
        ),
        key=lambda item: item["rollout_id"],
    )
    health = {**figures["health"], "unhealthy": unhealthy}
    return {"run": figures["run"], "tasks": tasks, "errors": figures["errors"], "health": health}


@pytest.mark.parametrize("release", E2E_RELEASES)
def test_the_report_reads_a_replayed_e2e_run_as_it_reads_the_live_one(tmp_path: Path, release: str) -> None:
    run_dir = E2E_RUNS / release
    output = tmp_path / "replayed.jsonl"
    replay_cli(run_dir, output)
    replayed, live = build_report([output]), build_report([run_dir / "live_spans.otlp.jsonl"])
    assert comparable(replayed) == comparable(live)
    assert replayed["source"]["replayed_spans"] == replayed["source"]["spans"] and live["source"]["replayed_spans"] == 0
    assert live["run"]["dispatches"] == len(rows(run_dir / "rollouts.jsonl"))
    # Durations: the live spans' own; replayed, ng_perf's latency where 0.7.0 wrote it, else a placeholder left out.
    assert live["time"]["measured"] == live["run"]["dispatches"]
    expected_measured = live["run"]["dispatches"] if release == "nemo-gym-0.7.0" else 0
    assert replayed["time"]["measured"] == expected_measured
    assert replayed["time"]["without_duration"] == live["run"]["dispatches"] - expected_measured
