"""Tokens in the report and compare: per rollout and per task (mean, p95), the slowest model calls,
tokens against reward, the change per task.

The spans are made by the real SDK through the package's decorators (a dispatch whose extractor
puts the rollout's token totals on it, as the NeMo Gym preset does where the framework reports
usage; a verify), with model-call spans (kind CLIENT, GenAI semantic conventions) made by the
package's tracer inside the dispatch, and written as OTLP/JSON lines by the package's file exporter.
What is checked is what the ``gym-instrument`` command prints and writes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

import gym_instrument
from gym_instrument import semconv
from gym_instrument.tools.export import JsonFileSpanExporter

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
MS = 1_000_000
# Per task: (dispatch totals or None, the model calls' (input, output, duration ms), rewards of its two repeats).
TASKS = {
    "with-totals": ((100, 50, 2), [(1, 1, 5), (1, 1, 7)], [1.0, 1.0]),  # totals win over its spans
    "spans-only": (None, [(30, 20, 40), (30, 20, 9)], [0.0, 1.0]),
    "no-usage": (None, [], [1.0, 0.0]),
}


def write_run(instrument: Any, telemetry: Any, path: Path, scale: int = 1) -> None:
    instrument(targets=[])
    tracer = telemetry.tracer_provider.get_tracer(semconv.INSTRUMENTATION_NAME)

    def totals(call: gym_instrument.Call) -> dict[str, Any]:
        usage = call.result.get("usage") if isinstance(call.result, dict) else None
        if not usage:
            return {}
        return {
            "gen_ai.usage.input_tokens": usage[0],
            "gen_ai.usage.output_tokens": usage[1],
            "nemo.gym.rollout.model_calls": usage[2],
        }

    @gym_instrument.verify
    def verify(body: dict[str, Any]) -> dict[str, Any]:
        return {"reward": body["reward"]}

    @gym_instrument.dispatch(extractors=[totals])
    def dispatch(row: dict[str, Any]) -> dict[str, Any]:
        start = 1_000 * MS
        for tokens_in, tokens_out, duration in row["calls"]:
            span = tracer.start_span(
                "chat my-model",
                kind=trace.SpanKind.CLIENT,
                start_time=start,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "my-model",
                    "gen_ai.response.model": "my-model-v2",
                    "gen_ai.usage.input_tokens": tokens_in * scale,
                    "gen_ai.usage.output_tokens": tokens_out * scale,
                    "gen_ai.response.finish_reasons": ["stop"],
                    "nemo.gym.rollout.id": row["rollout_id"],
                },
            )
            span.end(end_time=start + duration * MS)
            start += duration * MS
        verify({"reward": row["reward"]})
        usage = row["usage"]
        return {"usage": None if usage is None else tuple(value * scale for value in usage)}

    for index, (task, (usage, calls, rewards)) in enumerate(TASKS.items()):
        for repeat, reward in enumerate(rewards):
            rollout_id = f"{index}-{repeat}"
            dispatch(
                {
                    "task_id": task,
                    "_ng_task_index": index,
                    "_ng_rollout_index": repeat,
                    "rollout_id": rollout_id,
                    "calls": calls,
                    "usage": usage,
                    "reward": reward,
                }
            )
    JsonFileSpanExporter(path).export(telemetry.spans())


def report(path: Path) -> dict[str, Any]:
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(path), "--no-html", "--format", "json"], capture_output=True, text=True
    )
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout)  # type: ignore[no-any-return]


def test_tokens_per_rollout_per_task_and_against_reward(instrument: Any, telemetry: Any, tmp_path: Path) -> None:
    write_run(instrument, telemetry, tmp_path / "spans.jsonl")
    tokens = report(tmp_path / "spans.jsonl")["tokens"]
    # with-totals: 150 a rollout from its dispatch (its spans' 4 left out); spans-only: 2 x (30 + 20) summed from spans.
    assert (tokens["from_dispatch_totals"], tokens["from_model_call_spans"], tokens["model_call_spans"]) == (2, 2, 8)
    assert (tokens["input_tokens"], tokens["output_tokens"], tokens["model_calls"]) == (320, 180, 8)
    assert tokens["per_rollout"] == {"rollouts": 4, "mean": 125.0, "p95": 150, "max": 150}
    assert tokens["tasks"] == {
        "with-totals": {"rollouts": 2, "mean": 150.0, "p95": 150, "max": 150},
        "spans-only": {"rollouts": 2, "mean": 100.0, "p95": 100, "max": 100},
    }  # no-usage: no tokens, not zero tokens
    assert [(item["reward"], item["rollouts"], item["mean"]) for item in tokens["by_reward"]] == [
        ("0", 1, 100.0),
        ("1", 3, pytest.approx(400 / 3)),
    ]
    slowest = tokens["slowest_model_calls"]
    # Equal durations in a fixed order (by span id), whatever order the spans were read in.
    assert sorted((item["rollout_id"], item["duration_ms"]) for item in slowest[:2]) == [("1-0", 40.0), ("1-1", 40.0)]
    assert slowest[0]["name"] == "chat my-model" and slowest[0]["model"] == "my-model-v2"
    assert (slowest[0]["input_tokens"], slowest[0]["output_tokens"], slowest[0]["finish_reasons"]) == (30, 20, ["stop"])


def test_the_terminal_and_the_page_show_them(instrument: Any, telemetry: Any, tmp_path: Path) -> None:
    write_run(instrument, telemetry, tmp_path / "spans.jsonl")
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(tmp_path / "spans.jsonl"), "--html", str(tmp_path / "report.html")],
        capture_output=True,
        text=True,
    )
    assert process.returncode == 0, process.stderr
    out = process.stdout
    assert (
        "tokens: 500 (input 320, output 180) in 8 model calls over 4 rollouts; per rollout mean 125, p95 150"
        " (2 from the dispatch's totals, 2 summed from model-call spans)" in out
    )
    assert "tokens against reward: reward 0: mean 100, p95 100 (1 rollout); reward 1: mean 133, p95 150 (3 rollouts)" in out
    assert re.search(r"^spans-only\s+2\s+100\s+100\s+100$", out, re.MULTILINE)
    assert re.search(r"^chat my-model\s+1-1\s+40\.0 ms\s+30\s+20\s", out, re.MULTILINE)
    page = (tmp_path / "report.html").read_text()
    assert "<h2 id='tokens'>Tokens</h2>" in page and 'id="model-calls-table"' in page and 'id="tokens-reward-table"' in page


def test_compare_shows_the_change_in_tokens_per_task(instrument: Any, telemetry: Any, tmp_path: Path) -> None:
    write_run(instrument, telemetry, tmp_path / "a.jsonl")
    telemetry.clear()
    write_run(instrument, telemetry, tmp_path / "b.jsonl", scale=2)  # every count doubled
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert process.returncode == 0, process.stderr
    comparison = json.loads(process.stdout)
    assert comparison["overall"]["tokens_mean"] == {"a": 125.0, "b": 250.0, "diff": 125.0}
    tasks = {task["task"]: task["measures"] for task in comparison["tasks"]}
    assert tasks["with-totals"]["tokens_mean"] == {"a": 150.0, "b": 300.0, "diff": 150.0}
    assert tasks["no-usage"]["tokens_mean"] == {"a": None, "b": None, "diff": None}
    text = subprocess.run(
        [str(GYM_INSTRUMENT), "compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], capture_output=True, text=True
    ).stdout
    assert re.search(r"^tokens per rollout, mean\s+125\s+250\s+\+125$", text, re.MULTILINE)
    assert re.search(r"^spans-only\s.*100 -> 200 \(\+100\)$", text, re.MULTILINE)
