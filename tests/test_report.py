"""``gym-instrument report``: the figures, the terminal summary and the HTML page of a real traced run.

The spans come from the demo pipeline run under ``opentelemetry-instrument`` with OpenTelemetry's
OTLP/JSON file exporter (what ``make demo`` does); the expected figures are computed here from the
pipeline's own ``rollouts.jsonl``, not from the spans.
"""

from __future__ import annotations

import base64
import json
import math
import random
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo"))

import run_demo

from gym_instrument.tools.report import build_report
from gym_instrument.tools.report.figures import DurationSketch, RunFigures, pass_at_k
from gym_instrument.tools.report.otlp import ReadStats, Span, read_spans, span_files

GYM_INSTRUMENT = Path(sys.executable).parent / "gym-instrument"
TEMPLATE = "http://viewer.test/trace/{trace_id}?span={span_id}"
TASK_LABELS = ["arith-001", "arith-002", "geo-17", "#3"]  # the demo's last task has no task id: named by its index
# The demo's masked and no-answer rollouts are infrastructure failures, 2 of its 12 rollouts: over the
# default --max-infra-failures (5 %), so a report of it exits with code 4 (and writes everything all the same).
DEMO_EXIT = 4
DEMO_FIRST_LINE = (
    "OVER THE LIMIT: infrastructure failures: 2 of 12 rollouts (17%, over --max-infra-failures 5%): masked 1, no_answer 1;"
    " scored zero (reward 0, no failure): 2"
)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    spans_file, rollouts_file, _ = run_demo.run_pipeline(tmp_path_factory.mktemp("demo"))
    return spans_file, [json.loads(line) for line in rollouts_file.read_text().splitlines()]


def report_json(*arguments: str) -> dict[str, Any]:
    process = subprocess.run([str(GYM_INSTRUMENT), "report", *arguments, "--format", "json"], capture_output=True, text=True)
    figures: dict[str, Any] = json.loads(process.stdout)
    # The demo's masked and no-answer rollouts are 2 of its 12: over the default limit, exit code 4.
    assert process.returncode == (4 if figures["infra_failures"]["over_limit"] else 0), process.stderr
    return figures


def expected_by_task(rollouts: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per task index, what the pipeline's output rows say: rewards (numeric, unmasked, no failure kind), masked,
    failure kinds, unscored."""
    tasks: dict[int, dict[str, Any]] = defaultdict(lambda: {"rewards": [], "masked": 0, "failure_kinds": 0, "unscored": 0})
    for row in rollouts:
        task = tasks[row["_ng_task_index"]]
        reward = row.get("reward")
        if row.get("failure_kind") is not None:
            task["failure_kinds"] += 1
        elif row.get("mask_sample"):
            task["masked"] += 1
        elif isinstance(reward, float):
            task["rewards"].append(reward)
        else:
            task["unscored"] += 1
    return tasks


def test_figures_per_task_match_the_rollouts_file(demo_run: Any, tmp_path: Path) -> None:
    spans_file, rollouts = demo_run
    figures = report_json(str(spans_file), "--html", str(tmp_path / "report.html"))
    tasks = figures["tasks"]
    assert [task["task"] for task in tasks] == TASK_LABELS
    for task, (index, expected) in zip(tasks, sorted(expected_by_task(rollouts).items()), strict=True):
        rewards = expected["rewards"]
        assert task["task_index"] == index
        assert task["scored"] == len(rewards)
        assert task["masked"] == expected["masked"]
        assert task["failure_kinds"] == expected["failure_kinds"]
        assert task["unscored"] == expected["unscored"]
        assert task["mean_reward"] == pytest.approx(sum(rewards) / len(rewards))
        mean = sum(rewards) / len(rewards)
        assert task["reward_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)))
        successes = sum(r >= 1.0 for r in rewards)
        assert task["success_rate"] == pytest.approx(successes / len(rewards))
        assert list(task["pass_at_k"]) == [str(k) for k in range(1, len(rewards) + 1)]
        assert task["pass_at_k"][str(len(rewards))] == (1.0 if successes else 0.0)
        assert task["zero_variance"] == (len(set(rewards)) == 1)
    arith_001, arith_002, geo_17, no_id = tasks
    assert arith_001["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": 1.0, "3": 1.0}
    assert arith_002["errors"] == {"rollout_pipeline.AgentUnavailable": 1}  # the first attempt of 1-2, retried
    assert arith_002["rollouts"] == 3 and arith_002["dispatches"] == 4
    assert geo_17["zero_variance"] and no_id["zero_variance"]  # every scored repeat got 1.0

    run = figures["run"]
    all_rewards = [reward for task in expected_by_task(rollouts).values() for reward in task["rewards"]]
    assert run["dispatches"] == 13 and run["errors"] == 1 and run["scored"] == len(all_rewards) == 10
    assert run["rollouts"] == 12 and run["failed"] == 0 and run["replaced_attempts"] == 1  # 1-2 failed, its retry replaced it
    assert run["mean_reward"] == pytest.approx(sum(all_rewards) / len(all_rewards))
    assert run["zero_variance_groups"] == 2 and run["groups"] == 4
    assert [item["task"] for item in run["zero_variance_tasks"]] == ["geo-17", "#3"]
    assert run["pass_at_k"]["1"]["value"] == pytest.approx(sum(task["success_rate"] for task in tasks) / 4)
    assert figures["errors"]["by_type"] == {"rollout_pipeline.AgentUnavailable": 1}
    assert [item["rollout_id"] for item in figures["errors"]["rollouts"]] == ["1-2"]


def test_health_and_time_figures(demo_run: Any) -> None:
    spans_file, _ = demo_run
    figures = report_json(str(spans_file), "--no-html", "--trace-url", TEMPLATE)
    health = figures["health"]
    assert health["verdicts"] == {"healthy": 8, "unhealthy": 4}
    assert health["checks"][0] == {"check": "model_call_runaway_generation", "rollouts": 2}
    assert {item["check"] for item in health["checks"]} == {
        "model_call_runaway_generation",
        "rollout_token_count_mismatch",  # twice in one verdict's findings: one rollout
        "agent_turn_hollow",
        "rollout_ended_on_failed_model_call",
    }
    assert next(item for item in health["checks"] if item["check"] == "rollout_token_count_mismatch")["rollouts"] == 1
    unhealthy = {item["rollout_id"]: item for item in health["unhealthy"]}
    assert sorted(unhealthy) == ["0-2", "1-1", "2-2", "3-1"]
    assert unhealthy["3-1"]["checks"] == ["agent_turn_hollow", "rollout_ended_on_failed_model_call"]
    assert unhealthy["3-1"]["task"] == "#3" and unhealthy["0-2"]["task"] == "arith-001"
    assert [task["unhealthy"] for task in figures["tasks"]] == [1, 1, 1, 1]

    time = figures["time"]
    assert time["measured"] == 13 and time["without_duration"] == 0
    assert 0 < time["p50_ms"] <= time["p95_ms"] <= time["max_ms"]
    slowest = [item["duration_ms"] for item in time["slowest"]]
    assert slowest == sorted(slowest, reverse=True) and slowest[0] == pytest.approx(time["max_ms"])
    for rollout in [*time["slowest"], *health["unhealthy"], *figures["errors"]["rollouts"]]:
        assert rollout["trace_url"] == f"http://viewer.test/trace/{rollout['trace_id']}?span={rollout['span_id']}"
        assert re.fullmatch(r"[0-9a-f]{32}", rollout["trace_id"])


def test_html_page_has_the_task_table_links_and_pictures(demo_run: Any, tmp_path: Path) -> None:
    spans_file, _ = demo_run
    page_path = tmp_path / "out" / "run.html"
    process = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(spans_file), "--html", str(page_path), "--trace-url", "phoenix"],
        capture_output=True,
        text=True,
    )
    assert process.returncode == DEMO_EXIT, process.stderr
    assert f"report: {page_path}" in process.stdout
    page = page_path.read_text()
    tasks_table = page[page.index("<h2 id='tasks'>") : page.index("</table>", page.index("<h2 id='tasks'>"))]
    for label in TASK_LABELS:
        assert re.search(rf"<td[^>]*>{re.escape(label)}</td>", tasks_table)
    assert tasks_table.count('<tr class="flat">') == 2  # the two groups whose rewards are all equal
    figures = build_report([spans_file], trace_url="phoenix")
    rollouts = [*figures["time"]["slowest"], *figures["health"]["unhealthy"], *figures["errors"]["rollouts"]]
    assert len(rollouts) == 13 + 4 + 1
    links = set(re.findall(r'href="([^"]+)"', page))
    for rollout in rollouts:
        assert f"http://127.0.0.1:6006/redirects/traces/{rollout['trace_id']}" in links
    # Pictures: inline SVG drawn by the package (no plotting library, no script from the network).
    assert page.count('<svg class="chart"') == 5  # rewards, reward per task, verdicts, failed checks, durations
    assert "Reward per task" in page and "Dispatch durations" in page and "Failed checks, by rollouts hit" in page
    assert "<script src=" not in page and "plotly" not in page.lower()
    assert len(page.encode()) < 200_000


E070 = Path(__file__).resolve().parent / "data" / "e2e_runs" / "nemo-gym-0.7.0" / "live_spans.otlp.jsonl"


def test_every_rollout_with_its_reward_verdict_and_retry(demo_run: Any) -> None:
    spans_file, rollouts = demo_run
    figures = report_json(str(spans_file), "--no-html", "--trace-url", TEMPLATE)
    table = figures["rollouts"]
    assert table["total"] == table["listed"] == 13
    rows = {row["rollout_id"]: row for row in table["rows"]}
    assert len(rows) == 13
    by_id = {f"{row['_ng_task_index']}-{row['_ng_rollout_index']}": row for row in rollouts}
    by_id["1-2-a1"] = by_id.pop("1-2")  # the output row of the retried rollout is its second attempt
    for rollout_id, row in by_id.items():
        shown = rows[rollout_id]
        if row.get("failure_kind") is not None:
            assert (shown["outcome"], shown["failure_kind"], shown["reward"]) == ("failure kind", row["failure_kind"], None)
        elif row.get("mask_sample"):
            assert (shown["outcome"], shown["reward"]) == ("masked", None)
        else:
            assert shown["reward"] == row["reward"] and shown["outcome"] in ("success", "below threshold")
        assert shown["repeat"] == row["_ng_rollout_index"] and shown["duration_ms"] > 0
        assert shown["trace_url"] == f"http://viewer.test/trace/{shown['trace_id']}?span={shown['span_id']}"
    assert rows["1-2"]["error_type"] == "rollout_pipeline.AgentUnavailable" and rows["1-2"]["reward"] is None
    assert rows["1-2"]["replaced"] is True
    assert rows["1-2"]["retried_by"] == "1-2-a1" and rows["1-2-a1"]["retry_of"] == "1-2"
    assert rows["3-1"]["verdict"] == "unhealthy"
    assert rows["3-1"]["checks"] == ["agent_turn_hollow", "rollout_ended_on_failed_model_call"]
    retries = figures["retries"]
    assert retries["retried_dispatches"] == 1 and retries["recovered"] == 1 and retries["still_failed"] == 0
    (chain,) = retries["chains"]
    assert [(step["rollout_id"], step["error_type"]) for step in chain["attempts"]] == [
        ("1-2", "rollout_pipeline.AgentUnavailable"),
        ("1-2-a1", None),
    ]
    assert chain["attempts"][1]["reward"] == 1.0 and chain["attempts"][1]["verdict"] == "healthy"
    # Every rollout in the reward figure once: 8 rewards of 1, 2 of 0, one masked, one failure kind (the failed
    # attempt that its retry replaced is not a rollout).
    rewards = figures["rewards"]
    assert rewards["values"] == {"0.0": 2, "1.0": 8} and rewards["binary"] and rewards["bins"] == []
    counts = ("masked", "failure_kind", "unscored", "unverified", "failed")
    assert tuple(rewards[name] for name in counts) == (1, 1, 0, 0, 0)
    assert [group["name"] for group in figures["groups"]["agent"]] == ["demo_agent"]


def test_reward_against_health_on_a_real_nemo_gym_run() -> None:
    figures = report_json(str(E070), "--no-html")
    crossed = figures["reward_health"]
    assert crossed["counts"] == {"success": {"healthy": 5, "unhealthy": 4}, "below threshold": {"unhealthy": 5}}
    assert crossed["succeeded_unhealthy_total"] == 4
    flagged = crossed["succeeded_unhealthy"]
    assert sorted(item["rollout_id"] for item in flagged) == ["3-0", "3-1", "4-0", "4-1"]
    assert {item["reward"] for item in flagged} == {1.0} and {item["verdict"] for item in flagged} == {"unhealthy"}
    assert all(item["reward"] in (0.0, 1.0) for item in figures["health"]["unhealthy"])  # the unhealthy list has rewards
    # NeMo Gym 0.7.0's native task ids (compact JSON mappings) read as taskset/task.
    labels = [task["task"] for task in figures["tasks"]]
    assert labels[-2:] == ["e2e_mcqa_native/native-ohm", "e2e_mcqa_native/native-prime"]
    assert figures["tasks"][-1]["task_id"] == '{"task_id":"native-prime","taskset":"e2e_mcqa_native"}'
    assert [group["name"] for group in figures["groups"]["taskset"]] == ["(no taskset)", "e2e_mcqa_native"]
    agents = {group["name"]: group for group in figures["groups"]["agent"]}
    assert agents["example_single_tool_call_simple_agent"]["dispatches"] == 4
    assert agents["mcqa_simple_agent"]["scored"] == 6
    assert sum(group["dispatches"] for group in agents.values()) == figures["run"]["dispatches"] == 14


def test_reward_histogram_when_rewards_are_not_binary() -> None:
    spans = []
    for trace in range(1, 201):
        identity = {"nemo.gym.task.id": f"t{trace % 4}", "nemo.gym.rollout.id": str(trace)}
        spans.append(_span("gym.rollout.dispatch", trace, identity))
        spans.append(_span("gym.verify", trace, {"nemo.gym.rollout.id": str(trace), "nemo.gym.rollout.reward": trace / 200}))
    rewards = RunFigures().add_all(spans).figures()["rewards"]
    assert not rewards["binary"] and len(rewards["bins"]) == 20
    assert sum(item["count"] for item in rewards["bins"]) == 200
    assert rewards["bins"][0]["from"] == pytest.approx(0.01) and rewards["bins"][-1]["to"] == pytest.approx(1.0)


def test_the_rollout_table_is_bounded_and_the_counts_exact() -> None:
    spans = []
    for trace in range(1, 1001):
        rollout_id = f"{trace}-0"
        spans.append(_span("gym.rollout.dispatch", trace, {"nemo.gym.task.index": trace, "nemo.gym.rollout.id": rollout_id}))
        spans.append(_span("gym.verify", trace, {"nemo.gym.rollout.id": rollout_id, "nemo.gym.rollout.reward": 1.0}))
    for trace in range(1, 1001):  # the health pass after the whole collection
        verdict = {"nemo.gym.rollout.id": f"{trace}-0", "nemo.gym.health.verdict": "unhealthy" if trace % 10 else "healthy"}
        spans.append(_span("gym.rollout.health", trace, verdict))
    figures = RunFigures(rollout_rows=50).add_all(spans).figures()
    assert figures["rollouts"]["listed"] == len(figures["rollouts"]["rows"]) == 50
    assert figures["rollouts"]["total"] == 1000
    assert figures["reward_health"]["counts"] == {"success": {"healthy": 100, "unhealthy": 900}}
    assert figures["reward_health"]["succeeded_unhealthy_total"] == 900


def test_terminal_summary(demo_run: Any) -> None:
    spans_file, _ = demo_run
    process = subprocess.run(
        [sys.executable, "-m", "gym_instrument.tools.report", str(spans_file), "--no-html"], capture_output=True, text=True
    )
    assert process.returncode == DEMO_EXIT, process.stderr
    out = process.stdout
    assert out.splitlines()[0] == DEMO_FIRST_LINE
    assert out.splitlines()[1] == (
        "rollouts: 12 (4 tasks; 13 dispatches, 1 a failed attempt that a retry replaced) = 8 succeeded (reward >= 1)"
        " + 2 scored zero + 2 infrastructure failures (1 masked); 4 unhealthy (of 12 with a verdict)"
    )
    assert re.match(r"wall time: [\d.]+ ms \(.* UTC\); tokens: none on these spans$", out.splitlines()[2])
    assert "groups with all rewards equal (no learning signal): 2 of 4: geo-17 (all 1), #3 (all 1)" in out
    assert "health: healthy 8, unhealthy 4" in out
    assert "errors by error.type: rollout_pipeline.AgentUnavailable 1" in out
    assert re.search(r"dispatch time: p50 [\d.]+ ms, p95 [\d.]+ ms, max [\d.]+ ms over 13 dispatches", out)
    for label in TASK_LABELS:
        assert re.search(rf"^{re.escape(label)}\s+3\s", out, re.MULTILINE)
    assert re.search(r"^#3\s+3-1\s+failure: no_answer\s+agent_turn_hollow", out, re.MULTILINE)  # unhealthy, its outcome
    assert "retries: 1 dispatch; 1 rollout recovered, 0 still failed: 1-2 -> 1-2-a1" in out
    assert "succeeded but unhealthy (a success the health pass flags: reward hacking or a broken judge?): 0" in out


def test_terminal_summary_of_a_real_run_names_the_rewarded_but_unhealthy() -> None:
    process = subprocess.run([str(GYM_INSTRUMENT), "report", str(E070), "--no-html"], capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    assert (
        "succeeded but unhealthy (a success the health pass flags: reward hacking or a broken judge?): 4: 3-1 (weather-sf),"
        in process.stdout
    )
    assert re.search(r"^e2e_mcqa_native/native-ohm\s+2\s", process.stdout, re.MULTILINE)
    assert re.search(
        r"^example_single_tool_call_simple_agent\s+2\s+4\s+0\s+4\s+1\.00\s+100%\s+100%$", process.stdout, re.MULTILINE
    )


def _collector_shaped(line: str) -> str:
    """The same batch as a generic protobuf JSON writer renders it: base64 ids, enum names, snake_case keys."""
    batch = json.loads(line)

    def b64(value: str) -> str:
        return base64.b64encode(bytes.fromhex(value)).decode()

    for resource in batch.pop("resourceSpans"):
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span["traceId"], span["spanId"] = b64(span["traceId"]), b64(span["spanId"])
                if "parentSpanId" in span:
                    span["parentSpanId"] = b64(span["parentSpanId"])
                span["kind"] = "SPAN_KIND_INTERNAL"
                if span.get("status", {}).get("code") == 2:
                    span["status"]["code"] = "STATUS_CODE_ERROR"
                span["start_time_unix_nano"] = span.pop("startTimeUnixNano")
        resource["scope_spans"] = resource.pop("scopeSpans")
        batch.setdefault("resource_spans", []).append(resource)
    return json.dumps(batch)


def test_reads_other_writers_and_skips_what_is_not_spans(demo_run: Any, tmp_path: Path) -> None:
    spans_file, _ = demo_run
    lines = spans_file.read_text().splitlines()
    folder = tmp_path / "collected"
    folder.mkdir()
    converted = [_collector_shaped(line) if "resourceSpans" in line else line for line in lines]
    (folder / "a.jsonl").write_text("\n".join(converted[: len(converted) // 2]) + "\n\nnot json\n[1, 2]\n")
    (folder / "b.json").write_text("\n".join(converted[len(converted) // 2 :]) + "\n")
    (folder / "notes.txt").write_text("ignored: not a .json/.jsonl file\n")
    original = build_report([spans_file])
    again = build_report([folder])
    assert again["source"]["skipped_lines"] == original["source"]["skipped_lines"] + 2
    for key in ("run", "tasks", "health"):
        assert again[key] == original[key]
    assert again["time"]["p50_ms"] == original["time"]["p50_ms"]


def _span(name: str, trace: int, attributes: dict[str, Any], start: int = 1, end: int = 2, status: int = 0) -> Span:
    return Span(name, f"{trace:032x}", f"{trace * 4 + len(name):016x}", None, start, end, status, attributes, {})


def test_verify_read_before_or_after_its_dispatch_joins_to_its_task() -> None:
    """Two processes' files: the verify spans may come first, last, or mixed with the dispatches."""
    dispatches = [
        _span("gym.rollout.dispatch", trace, {"nemo.gym.task.id": f"t{trace % 3}", "nemo.gym.rollout.id": f"{trace}"})
        for trace in range(30)
    ]
    verifies = [
        _span("gym.verify", trace, {"nemo.gym.rollout.id": f"{trace}", "nemo.gym.rollout.reward": float(trace % 2)})
        for trace in range(30)
    ]
    mixed = [span for pair in zip(verifies, dispatches, strict=True) for span in pair]
    orders = [dispatches + verifies, verifies + dispatches, mixed]
    results = []

    def lagging(lag: int) -> list[Span]:
        order = []
        for i, dispatch in enumerate(dispatches):
            order.append(dispatch)
            if i >= lag:
                order.append(verifies[i - lag])
        return order + verifies[len(dispatches) - lag :]

    orders.extend(lagging(lag) for lag in (3, 10, 29))
    results = []
    for order in orders:
        figures = RunFigures().add_all(order).figures()
        results.append([(task["task"], task["scored"], task["mean_reward"]) for task in figures["tasks"]])
        assert figures["run"]["rollouts_without_dispatch"] == 0
    assert all(result == results[0] for result in results)
    assert [scored for _, scored, _ in results[0]] == [10, 10, 10]

    # Past the store's capacity, the spans of further rollouts are counted, not joined (and the report says so).
    full = RunFigures(capacity=5).add_all(mixed).figures()
    assert full["source"]["spans_not_kept"] == 50 and full["run"]["rollouts"] == 5 and full["run"]["dispatches"] == 30


def test_pass_at_k_and_duration_quantiles() -> None:
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(10, 2, 5) == pytest.approx(1 - math.comb(8, 5) / math.comb(10, 5))
    generator = random.Random(7)
    durations = sorted(int(generator.lognormvariate(16, 1.5)) + 1 for _ in range(20_000))
    sketch = DurationSketch()
    for duration in durations:
        sketch.add(duration)
    for q in (0.5, 0.95, 0.99):
        exact = durations[math.ceil(q * len(durations)) - 1]
        assert sketch.quantile(q) == pytest.approx(exact, rel=0.02)
    assert sketch.quantile(1.0) == durations[-1] and sketch.max == durations[-1]
    assert sum(item["count"] for item in sketch.histogram()) == len(durations)


def test_reader_counts_what_it_read(demo_run: Any) -> None:
    spans_file, _ = demo_run
    stats = ReadStats()
    spans = list(read_spans(span_files([spans_file]), stats, progress=False))
    assert stats.spans == len(spans) == 13 + 12 + 12
    assert stats.other_signal_lines >= 1  # the metrics line the same exporter wrote
    assert stats.bad_lines == 0


def test_bad_arguments_exit_2_with_a_message(tmp_path: Path) -> None:
    missing = subprocess.run([str(GYM_INSTRUMENT), "report", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    (tmp_path / "empty.jsonl").write_text("")
    bad = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(tmp_path / "empty.jsonl"), "--trace-url", "http://x/{trace}"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "{trace_id}" in bad.stderr


def test_importing_the_package_does_not_import_the_report() -> None:
    heavy = "('plotly', 'tqdm', 'gym_instrument.tools.report')"
    code = f"import sys, gym_instrument; print(sorted(m for m in sys.modules if m.startswith({heavy})))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def report_on_a_terminal(*arguments: str) -> tuple[int, str, str]:
    """Run ``gym-instrument report`` with its stderr on a pseudo-terminal, as in a shell; exit code, stdout, terminal."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 24 x 100, as a terminal window has
    process = subprocess.Popen([str(GYM_INSTRUMENT), "report", *arguments], stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the command exited
            break
        if not chunk:
            break
        seen += chunk
    stdout = process.stdout.read() if process.stdout else b""
    os.close(controller)
    return process.wait(timeout=120), stdout.decode(), seen.decode(errors="replace")


def test_progress_bar_on_a_long_read_in_a_terminal(demo_run: Any, tmp_path: Path) -> None:
    from gym_instrument.tools.report.otlp import PROGRESS_BYTES

    spans_file, _ = demo_run
    long_file = tmp_path / "long.jsonl"
    with open(long_file, "wb") as out:
        out.write(spans_file.read_bytes())
        blank = b" " * (1 << 20) + b"\n"  # blank lines, read and skipped like any line: a long file that reads fast
        for _ in range(PROGRESS_BYTES // len(blank) + 1):
            out.write(blank)
    assert long_file.stat().st_size > PROGRESS_BYTES

    code, stdout, terminal = report_on_a_terminal(str(long_file), "--no-html")
    assert code == DEMO_EXIT and "rollouts: 12 (4 tasks; 13 dispatches" in stdout
    size = f"{long_file.stat().st_size / 1024**2:.1f}M"
    bar = rf"reading spans: 100%\|█+\| {re.escape(size)}/{re.escape(size)} "  # tqdm's bar, finished, over the file's bytes
    assert re.search(bar, terminal), terminal[-300:]

    code, stdout, terminal = report_on_a_terminal(str(spans_file), "--no-html")  # a short read: no bar
    assert code == DEMO_EXIT and "rollouts: 12 (4 tasks" in stdout and "reading spans" not in terminal
    code, _, terminal = report_on_a_terminal(str(long_file), "--no-html", "--no-progress")
    assert code == DEMO_EXIT and "reading spans" not in terminal


def test_progress_bar_on_request_and_never_into_a_pipe_by_default(demo_run: Any, tmp_path: Path) -> None:
    spans_file, _ = demo_run
    asked = subprocess.run(
        [str(GYM_INSTRUMENT), "report", str(spans_file), "--no-html", "--progress"], capture_output=True, text=True
    )
    assert asked.returncode == DEMO_EXIT and "reading spans: 100%" in asked.stderr
    piped = subprocess.run([str(GYM_INSTRUMENT), "report", str(spans_file), "--no-html"], capture_output=True, text=True)
    assert piped.returncode == DEMO_EXIT and piped.stderr == ""


def big_run(path: Path, rollouts: int = 600) -> Path:
    """A run of ``rollouts`` rollouts through the real SDK and the package's file exporter, the first one failed."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    from gym_instrument.tools.export import JsonFileSpanExporter

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(JsonFileSpanExporter(path)))
    tracer = provider.get_tracer("gym_instrument")
    for number in range(rollouts):
        rollout_id = f"{number % 50}-{number // 50}"
        identity = {"nemo.gym.task.index": number % 50, "nemo.gym.rollout.id": rollout_id}
        dispatch = tracer.start_span("gym.rollout.dispatch", attributes=identity)
        if number == 0:
            dispatch.set_attribute("error.type", "builtins.TimeoutError")
            dispatch.set_status(Status(StatusCode.ERROR))
        else:
            context = trace.set_span_in_context(dispatch)
            tracer.start_span("gym.verify", context=context, attributes={"nemo.gym.rollout.id": rollout_id}).end()
        dispatch.end()
    provider.shutdown()
    return path


def test_a_reader_that_leaves_early_keeps_the_exit_code(tmp_path: Path) -> None:
    """``report ... | head``: the command's code (4: over the limit) whether the reader left before or while it wrote."""
    spans = big_run(tmp_path / "spans.jsonl")
    command = [str(GYM_INSTRUMENT), "report", str(spans), "--no-html", "--max-infra-failures", "0"]
    for output in ([], ["--format", "json"]):
        # The reader is gone before a word is written.
        process = subprocess.Popen([*command, *output], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        errors = process.stderr.read()
        assert process.wait(timeout=120) == 4 and errors == b"", errors
    # A real `head` in a shell pipeline, as a person types it: the JSON is larger than a pipe holds, so the
    # command is still writing when head has read its line and left.
    pipeline = " ".join(map(shlex.quote, [*command, "--format", "json"])) + ' | head -1; echo "exit ${PIPESTATUS[0]}"'
    for _ in range(3):
        shell = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, timeout=120)
        assert shell.stdout.splitlines() == ["{", "exit 4"] and shell.stderr == "", shell.stderr
