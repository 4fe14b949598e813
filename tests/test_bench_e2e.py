"""The whole-run benchmark's own parts (``benchmarks/whole_run.py``), without starting NeMo Gym.

The harness end to end is ``make bench-e2e-smoke`` (real NeMo Gym 0.7.0, tiny sizes, minutes): too
slow for the suite. Here: what it reads from ``/proc``, how it names a process, the sameness check
of the configurations' outcomes, the span count, the workload it writes (every task answerable by
the scripted model), the profile's categories, and that ``make bench`` keeps its RESULTS.md section.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def whole_run() -> ModuleType:
    return _load("whole_run", BENCHMARKS / "whole_run.py")


@pytest.fixture(scope="module")
def model_server() -> ModuleType:
    return _load("e2e_model_server", REPO / "e2e" / "model_server.py")


def test_parse_stat_reads_own_and_children_cpu_and_start_time(whole_run: ModuleType) -> None:
    # A command with spaces and a parenthesis: fields are counted from the last ')'.
    line = "42 (python app.py (x)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 4 0 12345 0 0"
    assert whole_run.parse_stat(line) == (300, 10, 12345)


def test_parse_stat_of_this_process_grows_with_cpu_spent(whole_run: ModuleType) -> None:
    before, _, started = whole_run.parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass
    after, _, started_again = whole_run.parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert after > before and started == started_again


@pytest.mark.parametrize(
    ("cmdline", "cwd", "group"),
    [
        (["/v/bin/oteltap", "--port", "1"], "/w", "receiver"),
        (["/v/bin/python", "/r/e2e/model_server.py", "--answers", "t"], "/w", "model (scripted)"),
        (["/v/bin/python", "app.py"], "/v/site-packages/resources_servers/mcqa", "server mcqa"),
        (["bash", "-c", "cd x && source y && python app.py"], "/w", "shell wrappers"),
        (["/v/bin/python", "/v/site-packages/ray/core/src/ray/raylet/raylet"], "/w", "Ray"),
        (["/v/bin/python", "/v/bin/gym", "env", "start", "--config", "c"], "/w", "gym env start (head)"),
        # the collector's command names its Ray cluster: it is still the collector, not one of Ray's processes
        (["/v/bin/python", "/v/bin/gym", "eval", "run", "+ray_head_node_address=127.0.0.1:6379"], "/w", "collector"),
    ],
)
def test_group_of_names_each_part_of_a_run(whole_run: ModuleType, cmdline: list[str], cwd: str, group: str) -> None:
    assert whole_run.group_of(cmdline, cwd) == group


def test_cpu_between_counts_a_new_process_whole_and_a_known_one_by_its_growth(whole_run: ModuleType) -> None:
    cpu = whole_run.ProcessCPU
    ticks = whole_run.CLOCK_TICKS
    before = {(1, 10): cpu("a", "Ray", 100), (2, 10): cpu("b", "receiver", 5)}
    after = {(1, 10): cpu("a", "Ray", 100 + ticks), (3, 11): cpu("a", "server mcqa", 2 * ticks), (2, 10): cpu("b", "receiver", 5)}
    spent = whole_run.cpu_between(before, after)
    assert spent["a"] == Counter({"Ray": 1.0, "server mcqa": 2.0})
    assert spent["b"] == Counter({"receiver": 0.0})


def test_snapshot_finds_a_run_s_processes_by_marker_or_by_ancestry(whole_run: ModuleType) -> None:
    # A real process tree: a child with the run marker, and its child started with an empty environment
    # (as /proc shows a Ray agent whose title overwrote it); a process of another run, and one of none.
    marker, other = "m" + os.urandom(6).hex(), "o" + os.urandom(6).hex()
    grandchild = "import time; time.sleep(60)"
    child = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}], env={{}})\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    variable = whole_run.RUN_MARKER_VAR
    parent = subprocess.Popen([sys.executable, "-c", child], env={**os.environ, variable: marker}, stdout=subprocess.PIPE)
    stranger = subprocess.Popen([sys.executable, "-c", grandchild], env={**os.environ, variable: other})
    unmarked = subprocess.Popen([sys.executable, "-c", grandchild], env={})
    orphan_env = None
    try:
        assert parent.stdout is not None
        orphan_env = int(parent.stdout.readline())  # the child has started its own child
        found = whole_run.snapshot({marker})
        pids = {pid: process.marker for (pid, _), process in found.items()}
        assert pids == {parent.pid: marker, orphan_env: marker}
        assert Path(f"/proc/{orphan_env}/environ").read_bytes() == b""  # found by its parent alone
        both = whole_run.snapshot({marker, other})
        assert {pid for pid, _ in both} == {parent.pid, orphan_env, stranger.pid} and unmarked.pid not in {p for p, _ in both}
    finally:
        for process in (stranger, unmarked):
            process.kill()
        if orphan_env is not None:
            os.kill(orphan_env, 9)
        parent.kill()
        for process in (parent, stranger, unmarked):
            process.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_freeze_stops_a_run_s_whole_tree_and_thaw_resumes_it(whole_run: ModuleType) -> None:
    # A real tree of busy processes: a marked parent and its child with an empty environment, beside an
    # unmarked one. Frozen, the run's processes are stopped and spend no CPU; the other runs on.
    marker = "f" + os.urandom(6).hex()
    spin = "while True: pass"
    child = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {spin!r}], env={{}})\n"
        f"print(p.pid, flush=True)\n{spin}\n"
    )
    variable = whole_run.RUN_MARKER_VAR
    parent = subprocess.Popen([sys.executable, "-c", child], env={**os.environ, variable: marker}, stdout=subprocess.PIPE)
    unmarked = subprocess.Popen([sys.executable, "-c", spin], env={})
    grandchild = None
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        whole_run.freeze(marker)
        run = (parent.pid, grandchild)
        assert [_state(pid) for pid in run] == ["T", "T"] and _state(unmarked.pid) != "T"
        ticks = [whole_run.parse_stat(Path(f"/proc/{pid}/stat").read_text())[0] for pid in run]
        time.sleep(0.3)
        assert [whole_run.parse_stat(Path(f"/proc/{pid}/stat").read_text())[0] for pid in run] == ticks
        whole_run.thaw(marker)
        assert "T" not in [_state(pid) for pid in run]
    finally:
        for pid in (parent.pid, unmarked.pid, grandchild):
            if pid is not None:
                os.kill(pid, 9)
        for process in (parent, unmarked):
            process.wait()


def test_outcomes_must_be_the_same_rows_and_rewards_per_task(whole_run: ModuleType) -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": r, "reward": float((t + r) % 2)} for t in range(3) for r in range(2)]
    same_rewards_other_order = [{**row, "reward": 1.0 - row["reward"]} for row in rows]
    outcome = whole_run.rollout_outcomes(rows)
    assert outcome == {0: [0.0, 1.0], 1: [0.0, 1.0], 2: [0.0, 1.0]}
    assert whole_run.compare_outcomes({"none": outcome, "full": whole_run.rollout_outcomes(same_rewards_other_order)}) == []

    wrong = [{**row, "reward": 0.0} if row["_ng_task_index"] == 1 else row for row in rows]
    missing = [row for row in rows if row["_ng_task_index"] != 2]
    problems = whole_run.compare_outcomes(
        {"none": outcome, "contrib": whole_run.rollout_outcomes(wrong), "full": whole_run.rollout_outcomes(missing)}
    )
    assert any("task 1" in problem and "contrib" in problem for problem in problems)
    assert any("full wrote rows for tasks [2]" in problem for problem in problems)


def test_every_written_task_is_answered_by_the_scripted_model(
    whole_run: ModuleType, model_server: ModuleType, tmp_path: Path
) -> None:
    path = whole_run.write_tasks(tmp_path / "tasks.jsonl", 12)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 12 and len({row["task_id"] for row in rows}) == 12
    assert all(row["agent_ref"] == {"name": "mcqa_simple_agent"} for row in rows)
    key = model_server.load_answer_key(path)
    assert len(key) == 12
    for row in rows:
        prompt = model_server.last_user_text(row["responses_create_params"]["input"])
        assert key[prompt]["expected"] == row["expected_answer"]
        assert row["expected_answer"] in key[prompt]["letters"]


def test_spans_by_name_counts_spans_between_offsets_and_skips_metrics(whole_run: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "received.ndjson"
    span = {"traceId": "t", "spanId": "s", "kind": 2}
    first = "oteltap listening\n" + json.dumps({**span, "name": "POST /run"}) + "\n"
    later = (
        json.dumps({**span, "name": "gym.verify"})
        + "\n"
        + json.dumps({"name": "http.server.duration", "histogram": {}})
        + "\n"
        + json.dumps({**span, "name": "gym.verify"})
        + "\n"
    )
    path.write_text(first + later)
    assert whole_run.spans_by_name(path, 0, None) == Counter({"POST /run": 1, "gym.verify": 2})
    assert whole_run.spans_by_name(path, len(first.encode()), None) == Counter({"gym.verify": 2})


@pytest.mark.parametrize(
    ("filename", "category"),
    [
        ("/v/site-packages/gym_instrument/plan.py", "gym_instrument (the package's own code)"),
        ("/v/site-packages/opentelemetry/baggage/propagation/__init__.py", "propagation (baggage, W3C trace context)"),
        ("/v/site-packages/opentelemetry/attributes/__init__.py", "attribute cleaning"),
        ("/v/site-packages/opentelemetry/sdk/trace/__init__.py", "SDK span creation and processing"),
        ("/v/site-packages/opentelemetry/exporter/otlp/proto/http/trace_exporter/__init__.py", "export (OTLP encoding and HTTP)"),
        ("/v/site-packages/opentelemetry/instrumentation/asgi/__init__.py", "FastAPI / ASGI instrumentation"),
        ("/v/site-packages/nemo_gym/server_utils.py", "NeMo Gym, FastAPI, uvicorn, aiohttp, Python (the work itself)"),
    ],
)
def test_profile_categories(whole_run: ModuleType, filename: str, category: str) -> None:
    assert whole_run.category_of(filename) == category


def test_make_bench_keeps_the_whole_run_sections(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        sections = _load("bench_sections", BENCHMARKS / "sections.py")
    finally:
        sys.path.remove(str(BENCHMARKS))
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmarks\n\nold micro table\n")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nfirst")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nsecond")
    sections.WHOLE_RUN_PROFILE.write(results, "### profile")
    sections.WHOLE_RUN.write(results, "## A whole real run\n\nthird", before=sections.WHOLE_RUN_PROFILE)
    text = results.read_text()
    assert text.count(sections.WHOLE_RUN.begin) == 1 and "third" in text and "second" not in text
    assert text.index(sections.WHOLE_RUN.end) < text.index(sections.WHOLE_RUN_PROFILE.begin)

    fresh = tmp_path / "FRESH.md"
    fresh.write_text("# Benchmarks\n")
    sections.WHOLE_RUN_PROFILE.write(fresh, "### profile")
    sections.WHOLE_RUN.write(fresh, "## timed", before=sections.WHOLE_RUN_PROFILE)
    assert fresh.read_text().index("## timed") < fresh.read_text().index("### profile")

    regenerated = sections.keep(results, "# Benchmarks\n\nnew micro table\n")
    assert "new micro table" in regenerated and "old micro table" not in regenerated
    assert sections.WHOLE_RUN.of(regenerated) == sections.WHOLE_RUN.of(text)
    assert sections.WHOLE_RUN_PROFILE.of(regenerated) == sections.WHOLE_RUN_PROFILE.of(text)


def test_the_code_version_is_dirty_for_code_not_for_results(tmp_path: Path) -> None:
    sections = _load("bench_sections", BENCHMARKS / "sections.py")

    def git(*arguments: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *arguments], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    git("init", "-q")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("old figures\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
    commit = git("rev-parse", "--short", "HEAD")
    assert sections.code_version(tmp_path) == commit
    (tmp_path / "benchmarks" / "RESULTS.md").write_text("new figures\n")  # a run's own output
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert sections.code_version(tmp_path) == commit
    (tmp_path / "code.py").write_text("x = 2\n")
    assert sections.code_version(tmp_path) == commit + "-dirty"
    assert sections.code_version(tmp_path / "absent") == "unknown"


def test_the_harness_refuses_a_busy_machine_without_force(tmp_path: Path) -> None:
    # --max-busy -1: any machine is busy; the run must stop before starting anything.
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "whole_run.py"), "--quick", "--max-busy", "-1", "--no-output"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "REFUSED" in completed.stdout and "--force" in completed.stdout


def test_the_report_has_ratios_shares_spans_and_the_profile_breakdown(whole_run: ModuleType) -> None:
    collections = []
    for number in (1, 2):
        for name, wall, servers in (("none", 5.0, 2.0), ("contrib", 7.0, 4.0), ("full", 7.2 + number / 10, 4.2)):
            cpu = Counter({"collector": 4.0, "server mcqa": servers, "receiver": 0.0 if name == "none" else 1.0})
            outcome = {0: [0.0, 1.0]}
            collections.append(whole_run.Collection(name, number, 400, wall, cpu, 0.01, outcome, Counter({"healthy": 400})))
    spans = {"contrib": Counter({"POST /run": 800 * 43}), "full": Counter({"POST /run": 800 * 43, "gym.verify": 800 * 3})}
    categories = {category: 1.0 for category, _ in whole_run.CATEGORIES}
    profiles = [
        whole_run.Profile("contrib", 400, {"mcqa": 10.0}, dict(categories), {}),
        whole_run.Profile(
            "full",
            400,
            {"mcqa": 11.0},
            {**categories, "gym_instrument (the package's own code)": 1.5, "propagation (baggage, W3C trace context)": 1.4},
            {"roles.py:open_span -> sdk:start_span": 0.1},
            {"plan.py:wrapper": (0.1, 1.0, 12.0)},
        ),
    ]
    price = {
        "package_spans_per_rollout": 3.0,
        "other_spans_per_rollout": 43.0,
        "spans": {
            "ms_per_rollout": {"total": 0.30, "sender": 0.12, "receiver": 0.18},
            "rounds_total_ms": [0.25, 0.35],
            "times": 4,
        },
        "baggage": {
            "ms_per_rollout": 0.042,
            "hops_per_rollout": 7.0,
            "propagators": "CompositePropagator(W3CBaggagePropagator)",
            "us_per_hop_with": 12.0,
            "us_per_hop_without": 6.0,
        },
    }
    text = whole_run.report(whole_run.FULL, collections, spans, ["- Machine: test"], False, False, 60.0, profiles, price)
    assert "| full | " in text and "full / contrib" in text and "contrib / none" in text
    assert "1.043 / 1.050 / 1.057" in text  # full / contrib wall, min / median / max of 7.3/7 and 7.4/7
    # the goal, judged on those medians: wall 7.35/7, CPU 9.2/9 in both rounds
    assert "**Goal: full / contrib <= 1.02**, the median of 2 rounds' ratios: wall time 1.050 (**NOT met**;" in text
    assert "CPU of all processes 1.022 (**NOT met**; 95% interval of the median 1.022 to 1.022)" in text
    # full - contrib: (4 + 4.2 + 1) - (4 + 4 + 1) s of CPU over 400 rollouts, in both rounds
    assert "**The package's share**, full - contrib per rollout: 0.50 ms of CPU, the median of the rounds' own" in text
    assert "(95% interval of the median +0.50 to +0.50)" in text
    assert "Within a round it was +0.50 / +0.50 / +0.50 ms" in text
    assert "the package's 3.0 spans per rollout" in text and "0.30 ms per rollout" in text
    assert "on 7.0 requests per rollout" in text and "0.042 ms per rollout" in text
    # the least SPEC's spans and baggage cost, 0.30 + 0.042, and the rest of the 0.50 ms share
    assert "Together 0.34 ms" in text and "+0.16 ms per rollout" in text
    assert "| `gym.verify` | 0.00 | 3.00 |" in text
    assert "**Breakdown of the servers' share**" in text and "`plan.py:wrapper`" in text
    assert "Measured on a busy machine" not in text
    assert "cannot tell" not in text
    # Round 2's full spends 0.3 s less in its server: shares +0.50 and -0.25 ms, an interval that holds the price.
    noisy = [
        dataclasses.replace(c, cpu=c.cpu + Counter({"server mcqa": -0.3})) if (c.configuration, c.round) == ("full", 2) else c
        for c in collections
    ]
    text = whole_run.report(whole_run.FULL, noisy, spans, ["- Machine: test"], False, False, 60.0, profiles, price)
    assert "(95% interval of the median -0.25 to +0.50)" in text
    assert "That price lies inside the share's interval (-0.25 to +0.50 ms): this run cannot tell" in text
    assert "The rest of the share" not in text


def _rounds(whole_run: ModuleType, full_walls: list[float], full_cpus: list[float]) -> list[object]:
    collections = []
    for number, (wall, cpu) in enumerate(zip(full_walls, full_cpus, strict=True), start=1):
        for name, seconds, spent in (("contrib", 10.0, 10.0), ("full", wall, cpu)):
            collections.append(
                whole_run.Collection(name, number, 400, seconds, Counter({"collector": spent}), 0.0, {}, Counter())
            )
    return collections


def test_the_goal_is_judged_on_the_median_and_its_interval_narrows_with_rounds(whole_run: ModuleType) -> None:
    # Wall ratios 0.99 / 1.01 / 1.05: median 1.01, met. CPU ratios 1.00 / 1.03 / 1.04: median 1.03, not met.
    line = whole_run.goal_line(_rounds(whole_run, [9.9, 10.1, 10.5], [10.0, 10.3, 10.4]))[0]
    assert "the median of 3 rounds' ratios: wall time 1.010 (met;" in line
    assert "CPU of all processes 1.030 (**NOT met**;" in line
    # The same spread over more rounds pins the median down more tightly, around it.
    noisy = [1.0, 1.04, 0.99, 1.05, 1.02]
    few, many = whole_run.median_interval(noisy), whole_run.median_interval(noisy * 5)
    assert few[0] <= 1.02 <= few[1] and many[0] <= 1.02 <= many[1]
    assert many[1] - many[0] < few[1] - few[0]
    assert whole_run.median_interval([1.01] * 7) == (1.01, 1.01)


def test_the_speed_probe_times_its_piece_and_a_window_reads_its_samples(whole_run: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "speed.txt"
    probe = subprocess.Popen([sys.executable, str(BENCHMARKS / "speed_probe.py"), str(out), "--interval", "0.01"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 12):
            time.sleep(0.05)
    finally:
        probe.kill()
        probe.wait()
    samples = [(float(at), int(spent)) for at, spent in (line.split() for line in out.read_text().splitlines()[:12])]
    assert len(samples) == 12
    assert all(a < b for (a, _), (b, _) in itertools.pairwise(samples))  # time.monotonic(), in order
    assert all(spent > 0 for _, spent in samples)
    # A window holds the samples taken inside it, in microseconds; a window before the first holds none.
    start, end = samples[2][0], samples[9][0]
    expected = sum(spent for at, spent in samples[2:10]) / 8 / 1000
    assert whole_run.probe_mean(out, start, end) == pytest.approx(expected)
    assert whole_run.probe_mean(out, 0.0, samples[0][0] - 1) == 0.0
    assert whole_run.probe_mean(tmp_path / "absent.txt", 0.0, end) == 0.0


def test_ratios_adjusted_for_the_machine_s_speed(whole_run: ModuleType) -> None:
    # Each collection's wall and CPU follow the probe with power 0.8; full does 2% more work than contrib.
    speeds = [420.0, 800.0, 610.0, 455.0, 790.0, 500.0, 700.0, 430.0, 650.0, 820.0]
    collections = []
    for number in range(1, 6):
        for offset, (name, work) in enumerate((("contrib", 10.0), ("full", 10.2))):
            speed = speeds[2 * (number - 1) + offset]
            factor = (speed / 600.0) ** 0.8
            cpu = Counter({"collector": 1.5 * work * factor})
            collections.append(whole_run.Collection(name, number, 400, work * factor, cpu, 0.0, {}, Counter(), speed))
    raw = whole_run.ratios(collections, "full", "contrib", "cpu")
    assert max(raw) - min(raw) > 0.3  # the machine's speed swamps the 2%
    fit = whole_run.speed_fit(collections, "cpu")
    assert fit.slope == pytest.approx(0.8) and fit.correlation == pytest.approx(1.0)
    assert fit.collections == 10 and fit.spread == (420.0, 820.0)
    assert whole_run.ratios(collections, "full", "contrib", "cpu", fit) == pytest.approx([1.02] * 5)
    goal = " ".join(whole_run.goal_line(collections))
    assert "**The same rounds adjusted for the machine's speed** (below): wall time 1.020 (met;" in goal
    assert "CPU of all processes 1.020 (met; 95% interval of the median 1.020 to 1.020)" in goal
    speed = " ".join(whole_run.speed_lines(collections))
    assert "ranged from 420 to 820 us per piece" in speed
    assert "CPU follows the probe with slope 0.80 (correlation 1.00)" in speed and "to 0.000 (CPU)" in speed
    # At the median speed (630 us) contrib spends 15 s * (630/600)^0.8 over 400 rollouts, full 2% more.
    contrib = 15.0 * (630.0 / 600.0) ** 0.8 * 1000 / 400
    assert f"the package's share is +{0.02 * contrib:.2f} ms of CPU per rollout" in speed
    assert f"2.0% of contrib's {contrib:.2f} ms" in speed
    # Without probe samples for every collection there is no fit, and nothing is adjusted.
    collections[0].speed = 0.0
    assert whole_run.speed_fit(collections, "cpu") is None
    assert len(whole_run.goal_line(collections)) == 1 and whole_run.speed_lines(collections) == []


# What the receiver printed in a real ``make bench-e2e`` run (full, NeMo Gym 0.7.0): its banner, a metric
# line, and every span of two rollouts' traces.
RECEIVED_FULL = REPO / "tests" / "data" / "bench_e2e" / "received_full.ndjson"


def _received_spans() -> list[dict[str, object]]:
    return [json.loads(line) for line in RECEIVED_FULL.read_text().splitlines() if '"spanId"' in line]


def _span_price(arguments: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / "span_price.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_span_price_makes_every_span_again_for_a_real_receiver() -> None:
    spans = _received_spans()
    ours = sum(1 for span in spans if str(span["name"]).startswith("gym."))
    rollouts = sum(1 for span in spans if span["name"] == "gym.rollout.dispatch")
    clients = sum(1 for span in spans if span["kind"] == 3)
    assert ours and rollouts and clients

    arguments = [f"--spans={RECEIVED_FULL}", f"--rollouts={rollouts}", "--seconds=0.2", "--rounds=2", "--times=3"]
    done = _span_price([*arguments, "--calls=200", "--settle=0.3"])
    assert done.returncode == 0, done.stderr
    price = json.loads(done.stdout)

    assert price["package_spans_per_rollout"] == ours / rollouts
    assert price["other_spans_per_rollout"] == (len(spans) - ours) / rollouts
    # Per round: the others alone, then the others with each of ours made three times; the receiver got them all.
    assert price["spans"]["received"] == 2 * ((len(spans) - ours) + (len(spans) - ours + 3 * ours))
    assert len(price["spans"]["rounds_total_ms"]) == 2
    assert price["baggage"]["hops_per_rollout"] == clients / rollouts
    assert "W3CBaggagePropagator" in price["baggage"]["propagators"]


def test_span_price_refuses_propagators_that_carry_no_baggage() -> None:
    env = {**os.environ, "OTEL_PROPAGATORS": "tracecontext"}
    done = _span_price([f"--spans={RECEIVED_FULL}", "--rollouts=1", "--seconds=0.1", "--rounds=1", "--settle=0.3"], env)
    assert done.returncode != 0
    assert "does not carry baggage" in done.stderr


def test_the_gc_hook_counts_each_process_s_pauses_under_its_pid_and_start_time(whole_run: ModuleType, tmp_path: Path) -> None:
    # A real interpreter with the hook imported at start-up, as the venv's .pth does: two full collections,
    # then it waits; a forked child makes one of its own and exits; the parent makes one more and exits.
    child = (
        "import gc, os, sys\n"
        "gc.collect(); gc.collect()\n"
        "print('collected', flush=True); sys.stdin.readline()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    gc.collect(); sys.exit(0)\n"
        "os.waitpid(pid, 0); print(pid, flush=True)\n"
        "gc.collect()\n"
    )
    env = {**os.environ, "GYM_BENCH_GC_DIR": str(tmp_path), "PYTHONPATH": str(BENCHMARKS)}
    process = subprocess.Popen(
        [sys.executable, "-c", "import gc_hook\n" + child], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdin is not None
    assert process.stdout.readline() == "collected\n"
    _, _, started = whole_run.parse_stat(Path(f"/proc/{process.pid}/stat").read_text())
    key = (process.pid, started)
    deadline = time.monotonic() + 30
    while key not in whole_run.gc_pauses(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)  # the hook's thread writes within a quarter of a second
    collections, cpu_ns = whole_run.gc_pauses(tmp_path)[key]
    assert collections[2] >= 2 and cpu_ns[2] > 0
    process.stdin.write("go\n")
    process.stdin.close()
    forked = int(process.stdout.readline())
    assert process.wait(30) == 0
    final = whole_run.gc_pauses(tmp_path)
    assert final[key][0][2] >= collections[2] + 1  # written at exit
    children = [counts for (pid, _), (counts, _) in final.items() if pid == forked]
    assert len(children) == 1 and 1 <= children[0][2] < final[key][0][2]  # its own totals, from zero


def test_gc_between_puts_each_process_s_pauses_under_its_group(whole_run: ModuleType) -> None:
    cpu = whole_run.ProcessCPU
    before = {(1, 10): ([10, 1, 0], [1000, 500, 0]), (7, 20): ([5, 0, 0], [100, 0, 0])}
    after = {
        (1, 10): ([12, 1, 1], [1200, 500, 2_000_000_000]),  # a server that grew by one full collection
        (7, 20): ([9, 1, 1], [300, 100, 500_000_000]),  # the collector, gone by the snapshot
        (8, 21): ([3, 0, 0], [90, 0, 0]),  # a process started and gone within the window
        (9, 22): ([4, 0, 1], [40, 0, 250_000_000]),  # new since `before`: counted whole
    }
    processes = {(1, 10): cpu("m", "server mcqa", 0), (9, 22): cpu("m", "Ray", 0)}
    spent = whole_run.gc_between(before, after, processes, collector_pid=7)
    assert spent["server mcqa"] == {"collections": [2, 0, 1], "seconds": [200e-9, 0.0, 2.0]}
    assert spent["collector"] == {"collections": [4, 1, 1], "seconds": [200e-9, 100e-9, 0.5]}
    assert spent["exited"]["collections"] == [3, 0, 0]
    assert spent["Ray"] == {"collections": [4, 0, 1], "seconds": [40e-9, 0.0, 0.25]}


def test_the_report_puts_the_pauses_beside_the_share_outside_them(whole_run: ModuleType) -> None:
    # full spends 0.8 s more CPU than contrib per round, 0.6 s of it in one more full collection of its collector.
    collections = []
    for number in (1, 2, 3):
        for name, total, pause, full_collections in (("contrib", 20.0, 0.4, 1), ("full", 20.8, 1.0, 2)):
            pauses = {"collector": {"collections": [300, 30, full_collections], "seconds": [0.05, 0.05, pause - 0.1]}}
            collections.append(
                whole_run.Collection(name, number, 400, 10.0, Counter({"collector": total}), 0.0, {}, Counter(), 600.0, pauses)
            )
    text = "\n".join(whole_run.gc_lines(collections))
    assert "| collector | 1; 1.00 | 2; 2.50 | +1.50 |" in text  # 0.4 s and 1.0 s over 400 rollouts
    assert "| **all** | 1; 1.00 | 2; 2.50 | +1.50 |" in text
    # (20.8 - 1.0) - (20.0 - 0.4) = 0.2 s outside the pauses: 0.50 ms per rollout, of contrib's 49.00
    assert "in the pauses +1.50 ms" in text and "outside them +0.50 ms" in text and "1.0% of contrib's 49.00 ms" in text
    assert "full ran more full collections than contrib in 3 of 3 rounds, fewer in 0" in text
    assert whole_run.gc_lines([dataclasses.replace(c, gc={}) for c in collections]) == []


def test_the_profile_counts_calls_by_place_and_gives_shares_only_of_a_cost(whole_run: ModuleType) -> None:
    propagation, package = "propagation (baggage, W3C trace context)", "gym_instrument (the package's own code)"
    work = whole_run.OTHER
    times = {category: 1.0 for category, _ in whole_run.CATEGORIES}
    contrib = whole_run.Profile(
        "contrib", 400, {"mcqa": 10.0}, dict(times), {}, calls_by_category={propagation: 100.0, work: 9900.0}
    )
    full = whole_run.Profile(
        "full",
        400,
        {"mcqa": 11.0},
        {**times, package: 1.5, propagation: 1.4},
        {},
        calls_by_category={propagation: 400.0, work: 9900.0, package: 70.0},
    )
    text = "\n".join(whole_run.profile_lines([contrib, full]))
    # 300 more baggage calls and 70 of the package's, of contrib's 10,000
    assert f"| {propagation} | 100.0 | 400.0 | +300.0 | +3.00% |" in text
    assert f"| {package} | 0.0 | 70.0 | +70.0 | +0.70% |" in text
    assert "| **all** | 10000.0 | 10370.0 | +370.0 | +3.70% |" in text
    # the package's own code +0.5 of the servers' +0.9 in time: its share is given
    assert "the package's own code +0.500 (56%: per request" in text
    cheaper = dataclasses.replace(full, by_category={**times, package: 1.5, propagation: 0.0})  # -0.5 in all
    text = "\n".join(whole_run.profile_lines([contrib, cheaper]))
    assert "the package's own code +0.500 (per request" in text and "%: per request" not in text


def test_every_order_in_turn_balances_positions_and_who_runs_right_after_whom(whole_run: ModuleType) -> None:
    names = ("none", "contrib", "full")
    orders = whole_run.round_orders(names, 18)
    assert len(orders) == 18 and all(sorted(order) == sorted(names) for order in orders)
    for turn in range(3):  # each turn of six rounds on its own
        six = orders[turn * 6 : turn * 6 + 6]
        assert len(set(six)) == 6
        positions = Counter((order.index(name), name) for order in six for name in names)
        assert set(positions.values()) == {2}  # every configuration in every position twice
        adjacent = Counter(pair for order in six for pair in itertools.pairwise(order))
        assert adjacent[("contrib", "full")] == adjacent[("full", "contrib")] == 2
        assert set(adjacent.values()) == {2}
    # Two configurations alternate.
    assert whole_run.round_orders(("contrib", "full"), 4) == [("contrib", "full"), ("full", "contrib")] * 2


def test_blocks_split_the_rounds_evenly_and_in_order(whole_run: ModuleType) -> None:
    assert whole_run.blocks_of(18, 3) == [list(range(1, 7)), list(range(7, 13)), list(range(13, 19))]
    assert whole_run.blocks_of(7, 3) == [[1, 2, 3], [4, 5], [6, 7]]
    assert whole_run.blocks_of(1, 3) == [[1]]  # never an empty block
    assert whole_run.blocks_of(5, 1) == [[1, 2, 3, 4, 5]]


def test_the_report_gives_full_over_contrib_per_block(whole_run: ModuleType) -> None:
    collections = []
    # Block 1's full instance runs 4% above contrib's, block 2's 1% below: a difference of instances.
    for number, block, full_wall in ((1, 1, 10.4), (2, 1, 10.4), (3, 2, 9.9), (4, 2, 9.9)):
        for name, wall in (("contrib", 10.0), ("full", full_wall)):
            collection = whole_run.Collection(name, number, 400, wall, Counter({"collector": wall}), 0.0, {}, Counter())
            collection.block = block
            collections.append(collection)
    line = whole_run.block_lines(collections)[0]
    assert "block 1 (rounds 1 to 2): wall 1.040, CPU 1.040" in line
    assert "block 2 (rounds 3 to 4): wall 0.990, CPU 0.990" in line
    assert whole_run.block_lines([c for c in collections if c.block == 1]) == []  # one block: nothing to set side by side
    text = whole_run.report(whole_run.FULL, collections, {}, ["- Machine: test"], False, False, 60.0, [])
    assert "18 round(s) in 3 block(s), every configuration started afresh for each block" in text
    assert "**By block**" in text
    together = whole_run.report(
        dataclasses.replace(whole_run.FULL, together=True), collections, {}, ["- Machine: test"], False, False, 60.0, []
    )
    assert "in every round all configurations collect at the same moment" in together
    assert "in every round all configurations" not in text


def test_wait_reaped_sees_each_process_end_with_its_status_and_cpu(whole_run: ModuleType) -> None:
    spin = (
        "import sys, time\nend = time.process_time() + float(sys.argv[1])\n"
        "while time.process_time() < end: pass\nsys.exit(int(sys.argv[2]))"
    )
    slow = subprocess.Popen([sys.executable, "-c", spin, "0.6", "0"])
    fast = subprocess.Popen([sys.executable, "-c", spin, "0.1", "3"])
    (slow_code, slow_cpu, slow_end), (fast_code, fast_cpu, fast_end) = whole_run.wait_reaped([slow, fast], 60)
    assert (slow_code, fast_code) == (0, 3) and (slow.returncode, fast.returncode) == (0, 3)
    assert slow_cpu >= 0.6 and 0.1 <= fast_cpu < slow_cpu  # each one's own CPU, not the other's
    assert fast_end < slow_end  # each seen gone when it ended, not when the last did


def test_a_together_run_writes_its_own_section_beside_the_alone_one(whole_run: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    whole_run.WHOLE_RUN.write(results, "## A whole real run: alone\n\n`make bench-e2e` (alone)")
    whole_run.WHOLE_RUN_TOGETHER.write(results, whole_run.together_heading("## A whole real run: x\n\n`make bench-e2e` (y)"))
    text = results.read_text()
    assert "## A whole real run: alone" in text and "`make bench-e2e` (alone)" in text  # the alone run's stays
    assert "### Together: a whole real run: x" in text and "`make bench-e2e BENCH_E2E_ARGS=--together` (y)" in text


def _profiled_process(folder: Path, pid: int, cmdline: list[str], cwd: str, filename: str, calls: int) -> None:
    # A real profile in the pstats format yappi saves: `calls` calls of a function whose code lives at `filename`.
    import cProfile

    code: dict[str, object] = {}
    exec(compile("def work():\n    return sum(range(50))\n", filename, "exec"), code)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        code["work"]()  # type: ignore[operator]
    profiler.disable()
    profiler.dump_stats(str(folder / f"{pid}.pstat"))
    meta = {"pid": pid, "cmdline": cmdline, "cwd": cwd, "gc_collections": [1, 0, 0], "gc_seconds": [0.001, 0.0, 0.0]}
    (folder / f"{pid}.json").write_text(json.dumps(meta))


def test_a_profile_keeps_the_collector_apart_from_the_servers(whole_run: ModuleType, tmp_path: Path) -> None:
    server = ["/venv/bin/python", "/gym/resources_servers/mcqa/app.py"]
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run", "--no-serve", "+ray_head_node_address=127.0.0.1:1"]
    _profiled_process(tmp_path, 11, server, "/gym/resources_servers/mcqa", "/venv/site-packages/opentelemetry/baggage/x.py", 30)
    _profiled_process(tmp_path, 12, collector, "/work/full", "/work/main/gym_instrument/plan.py", 50)
    servers = whole_run.read_profiles(tmp_path, "full", 10, "servers")
    alone = whole_run.read_profiles(tmp_path, "full", 10, "collector")
    propagation, package = "propagation (baggage, W3C trace context)", "gym_instrument (the package's own code)"
    assert servers.calls_by_category.get(propagation) == 3.0 and package not in servers.calls_by_category
    assert list(servers.by_server) == ["mcqa"] and servers.gc_collections == [1, 0, 0]
    assert alone.calls_by_category.get(package) == 5.0 and propagation not in alone.calls_by_category
    assert alone.package_functions["plan.py:work"][2] == 5.0
    text = "\n".join(whole_run.profile_lines([servers, alone]))
    servers_part, collector_part = text.split("#### The collector")
    assert "`plan.py:work`" in collector_part and "`plan.py:work`" not in servers_part
    assert "| mcqa |" in servers_part


def test_the_collector_s_calls_are_counted_full_against_contrib(whole_run: ModuleType, tmp_path: Path) -> None:
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run", "+ray_head_node_address=127.0.0.1:1"]
    server = ["/venv/bin/python", "app.py"]
    for name, package_calls in (("contrib", 0), ("full", 40)):
        (tmp_path / name).mkdir()
        _profiled_process(tmp_path / name, 1, collector, "/w", "/venv/site-packages/aiohttp/client.py", 200)
        _profiled_process(tmp_path / name, 2, server, "/g/mcqa", "/venv/site-packages/aiohttp/web.py", 900)
        if package_calls:
            _profiled_process(tmp_path / name, 3, collector, "/w", "/work/main/gym_instrument/roles.py", package_calls)
    profiles = [
        whole_run.read_profiles(tmp_path / name, name, 10, part)
        for name in ("contrib", "full")
        for part in ("servers", "collector")
    ]
    collector_part = "\n".join(whole_run.profile_lines(profiles)).split("#### The collector")[1]
    package = "gym_instrument (the package's own code)"
    # Per 10 rollouts: each `work` call also calls the builtin `sum`, and each profile ends in one call of
    # `disable`. contrib's collector: 200 + 200 + 1 = 401 calls (the server's 1801 are not the collector's); full's
    # extra process: 40 + 40 + 1, of which the 40 `work` calls are the package's.
    assert f"| {package} | 0.0 | 4.0 | +4.0 | +9.98% |" in collector_part
    assert "| **all** | 40.1 | 48.2 | +8.1 | +20.20% |" in collector_part


def test_the_collector_s_breakdown_splits_its_extra_calls_by_whose_work_they_are(whole_run: ModuleType, tmp_path: Path) -> None:
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run"]
    places = {"sdk": "/venv/site-packages/opentelemetry/sdk/trace/x.py", "ours": "/work/main/gym_instrument/roles.py"}
    for name, calls in (("contrib", {"sdk": 30}), ("full", {"sdk": 90, "ours": 20})):
        (tmp_path / name).mkdir()
        for pid, (place, count) in enumerate(calls.items(), start=1):
            _profiled_process(tmp_path / name, pid, collector, "/w", places[place], count)
    profiles = [whole_run.read_profiles(tmp_path / name, name, 10, "collector") for name in ("contrib", "full")]
    text = "\n".join(whole_run.collector_lines(profiles))
    # Per 10 rollouts, each `work` call also calls the builtin `sum` (the host's share) and each profile one
    # `disable`: contrib 30 + 30 + 1 = 61 calls; full 90 + 90 + 1 + 20 + 20 + 1 = 222, 161 more (+263.93%),
    # 6 more span calls per rollout (+98.36%), the package's 2 (+32.79%), the rest 8.1 (+132.79%).
    assert "full - contrib = +16.1 Python calls per rollout, +263.93% of contrib's" in text
    assert "exported) +6.0 (+98.36%); the package's own code and wrapt +2.0 (+32.79%);" in text
    assert "the standard library) +8.1 (+132.79%)." in text


def test_a_variant_run_sets_its_variables_in_full_alone_and_writes_its_own_section(whole_run: ModuleType, tmp_path: Path) -> None:
    from gym_instrument.config.settings import GymConfig

    base = {"OTEL_SERVICE_NAME": "x", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    read = {
        (name, variant): GymConfig.resolve({}, environ=whole_run.configuration_env(name, base, variant))
        for name in ("contrib", "full")
        for variant in (None, "no-baggage")
    }
    assert read["full", None].baggage and read["contrib", "no-baggage"].baggage and read["contrib", None].baggage
    assert not read["full", "no-baggage"].baggage  # what the package itself reads from full's environment
    assert "OTEL_PYTHON_GYM_BAGGAGE" not in whole_run.configuration_env("none", base, "no-baggage")
    assert whole_run.configuration_env("full", base, "drop-ours")["OTEL_TRACES_SAMPLER"] == whole_run.SAMPLER_MODULE
    assert "OTEL_TRACES_SAMPLER" not in whole_run.configuration_env("contrib", base, "drop-ours")

    results = tmp_path / "RESULTS.md"
    whole_run.WHOLE_RUN_TOGETHER.write(results, "### Together: a whole real run: default\n\n`make bench-e2e` (z)")
    body = "## A whole real run: NeMo Gym 0.7.0 end to end\n\n`make bench-e2e` (y)"
    for variant in whole_run.VARIANTS:
        workload = whole_run.Workload(tasks=1, repeats=1, concurrency=1, rounds=1, together=True, variant=variant)
        whole_run.VARIANTS[variant].section.write(results, whole_run.variant_heading(body, workload))
    text = results.read_text()
    assert "### Together: a whole real run: default" in text  # the default run's section stays
    assert "### Baggage kept in-process: full with `OTEL_PYTHON_GYM_BAGGAGE=false`" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--together --no-baggage'` (y)" in text
    assert "`make bench-e2e BENCH_E2E_ARGS='--together --drop-ours'` (y)" in text


def test_the_drop_ours_sampler_is_found_by_the_sdk_and_drops_only_the_package_s_spans(
    whole_run: ModuleType, tmp_path: Path
) -> None:
    # Installed as the run installs it, in a folder of its own on a fresh interpreter's path; the SDK's
    # configurator finds it by the name OTEL_TRACES_SAMPLER gives, and a real provider records with it.
    site = tmp_path / "site"
    site.mkdir()
    whole_run.install_sampler(site)
    code = f"""
import sys
sys.path.insert(0, {str(site)!r})
from opentelemetry.sdk._configuration import _import_sampler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import trace

provider = TracerProvider(sampler=_import_sampler({whole_run.SAMPLER_MODULE!r}))
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("t")
with tracer.start_as_current_span("gym.rollout.dispatch") as dispatch:
    with tracer.start_as_current_span("POST") as post:
        pass
verify = tracer.start_span("gym.verify")
verify.end()
print(type(provider.sampler).__name__, dispatch.is_recording(), verify.is_recording())
print(post.get_span_context().trace_flags.sampled, [s.name for s in exporter.get_finished_spans()])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.split("\n")[:2] == ["DropOurs False False", "True ['POST']"]
    whole_run.remove_sampler(site)
    assert [path.name for path in site.rglob("*") if whole_run.SAMPLER_MODULE in path.name] == []  # bytecode too


def test_a_start_up_hook_runs_in_a_fresh_interpreter_and_leaves_nothing_once_removed(
    whole_run: ModuleType, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    whole_run.install_hook(site, whole_run.GC_HOOK, "gc_hook.py")
    code = f"import site, sys; site.addsitedir({str(site)!r}); print({whole_run.GC_HOOK!r} in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as an interpreter may: caches
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "True"  # the .pth imported it
    assert any(whole_run.GC_HOOK in path.name for path in (site / "__pycache__").iterdir())
    whole_run.remove_hook(site, whole_run.GC_HOOK)
    assert [path.name for path in site.rglob("*") if whole_run.GC_HOOK in path.name] == []  # bytecode too
