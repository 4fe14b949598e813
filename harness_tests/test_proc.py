"""What the whole run reads from ``/proc`` and ``wait4`` (``gym_harness.bench.proc``, ``gym_harness.processes``),
how it names a process, stops and resumes a run, and the probes beside it (``benchmarks/speed_probe.py``,
``benchmarks/gc_hook.py``), on real processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gym_harness import processes
from gym_harness.bench import proc

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_parse_stat_reads_own_and_children_cpu_and_start_time() -> None:
    # A command with spaces and a parenthesis: fields are counted from the last ')'.
    line = "42 (python app.py (x)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 4 0 12345 0 0"
    assert processes.parse_stat(line) == (300, 10, 12345)


def test_parse_stat_of_this_process_grows_with_cpu_spent() -> None:
    before, _, started = processes.parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass
    after, _, started_again = processes.parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert after > before and started == started_again


@pytest.mark.parametrize(
    ("cmdline", "cwd", "group"),
    [
        (["/v/bin/oteltap", "--port", "1"], "/w", "receiver"),
        (["/v/bin/python", "/r/gym_harness/model_server.py", "--answers", "t"], "/w", "model (scripted)"),
        (["/v/bin/python", "app.py"], "/v/site-packages/resources_servers/mcqa", "server mcqa"),
        (["bash", "-c", "cd x && source y && python app.py"], "/w", "shell wrappers"),
        (["/v/bin/python", "/v/site-packages/ray/core/src/ray/raylet/raylet"], "/w", "Ray"),
        (["/v/bin/python", "/v/bin/gym", "env", "start", "--config", "c"], "/w", "gym env start (head)"),
        # the collector's command names its Ray cluster: it is still the collector, not one of Ray's processes
        (["/v/bin/python", "/v/bin/gym", "eval", "run", "+ray_head_node_address=127.0.0.1:6379"], "/w", "collector"),
    ],
)
def test_group_of_names_each_part_of_a_run(cmdline: list[str], cwd: str, group: str) -> None:
    assert proc.group_of(cmdline, cwd) == group


def test_cpu_between_counts_a_new_process_whole_and_a_known_one_by_its_growth() -> None:
    cpu = proc.ProcessCPU
    ticks = proc.CLOCK_TICKS
    before = {(1, 10): cpu("a", "Ray", 100), (2, 10): cpu("b", "receiver", 5)}
    after = {(1, 10): cpu("a", "Ray", 100 + ticks), (3, 11): cpu("a", "server mcqa", 2 * ticks), (2, 10): cpu("b", "receiver", 5)}
    spent = proc.cpu_between(before, after)
    assert spent["a"] == Counter({"Ray": 1.0, "server mcqa": 2.0})
    assert spent["b"] == Counter({"receiver": 0.0})


def test_snapshot_finds_a_run_s_processes_by_marker_or_by_ancestry() -> None:
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
    variable = processes.RUN_MARKER_VAR
    parent = subprocess.Popen([sys.executable, "-c", child], env={**os.environ, variable: marker}, stdout=subprocess.PIPE)
    stranger = subprocess.Popen([sys.executable, "-c", grandchild], env={**os.environ, variable: other})
    unmarked = subprocess.Popen([sys.executable, "-c", grandchild], env={})
    orphan_env = None
    try:
        assert parent.stdout is not None
        orphan_env = int(parent.stdout.readline())  # the child has started its own child
        found = proc.snapshot({marker})
        pids = {pid: process.marker for (pid, _), process in found.items()}
        assert pids == {parent.pid: marker, orphan_env: marker}
        assert Path(f"/proc/{orphan_env}/environ").read_bytes() == b""  # found by its parent alone
        both = proc.snapshot({marker, other})
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


def test_freeze_stops_a_run_s_whole_tree_and_thaw_resumes_it() -> None:
    # A real tree of busy processes: a marked parent and its child with an empty environment, beside an
    # unmarked one. Frozen, the run's processes are stopped and spend no CPU; the other runs on.
    marker = "f" + os.urandom(6).hex()
    spin = "while True: pass"
    child = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {spin!r}], env={{}})\n"
        f"print(p.pid, flush=True)\n{spin}\n"
    )
    variable = processes.RUN_MARKER_VAR
    parent = subprocess.Popen([sys.executable, "-c", child], env={**os.environ, variable: marker}, stdout=subprocess.PIPE)
    unmarked = subprocess.Popen([sys.executable, "-c", spin], env={})
    grandchild = None
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        proc.freeze(marker)
        run = (parent.pid, grandchild)
        assert [_state(pid) for pid in run] == ["T", "T"] and _state(unmarked.pid) != "T"
        ticks = [processes.parse_stat(Path(f"/proc/{pid}/stat").read_text())[0] for pid in run]
        time.sleep(0.3)
        assert [processes.parse_stat(Path(f"/proc/{pid}/stat").read_text())[0] for pid in run] == ticks
        proc.thaw(marker)
        assert "T" not in [_state(pid) for pid in run]
    finally:
        for pid in (parent.pid, unmarked.pid, grandchild):
            if pid is not None:
                os.kill(pid, 9)
        for process in (parent, unmarked):
            process.wait()


def test_wait_reaped_sees_each_process_end_with_its_status_and_cpu() -> None:
    spin = (
        "import sys, time\nend = time.process_time() + float(sys.argv[1])\n"
        "while time.process_time() < end: pass\nsys.exit(int(sys.argv[2]))"
    )
    slow = subprocess.Popen([sys.executable, "-c", spin, "0.6", "0"])
    fast = subprocess.Popen([sys.executable, "-c", spin, "0.1", "3"])
    (slow_code, slow_cpu, slow_end), (fast_code, fast_cpu, fast_end) = proc.wait_reaped([slow, fast], 60)
    assert (slow_code, fast_code) == (0, 3) and (slow.returncode, fast.returncode) == (0, 3)
    assert slow_cpu >= 0.6 and 0.1 <= fast_cpu < slow_cpu  # each one's own CPU, not the other's
    assert fast_end < slow_end  # each seen gone when it ended, not when the last did


def test_the_speed_probe_times_its_piece_and_a_window_reads_its_samples(tmp_path: Path) -> None:
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
    assert proc.probe_mean(out, start, end) == pytest.approx(expected)
    assert proc.probe_mean(out, 0.0, samples[0][0] - 1) == 0.0
    assert proc.probe_mean(tmp_path / "absent.txt", 0.0, end) == 0.0


def test_the_gc_hook_counts_each_process_s_pauses_under_its_pid_and_start_time(tmp_path: Path) -> None:
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
    _, _, started = processes.parse_stat(Path(f"/proc/{process.pid}/stat").read_text())
    key = (process.pid, started)
    deadline = time.monotonic() + 30
    while key not in proc.gc_pauses(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)  # the hook's thread writes within a quarter of a second
    collections, cpu_ns = proc.gc_pauses(tmp_path)[key]
    assert collections[2] >= 2 and cpu_ns[2] > 0
    process.stdin.write("go\n")
    process.stdin.close()
    forked = int(process.stdout.readline())
    assert process.wait(30) == 0
    final = proc.gc_pauses(tmp_path)
    assert final[key][0][2] >= collections[2] + 1  # written at exit
    children = [counts for (pid, _), (counts, _) in final.items() if pid == forked]
    assert len(children) == 1 and 1 <= children[0][2] < final[key][0][2]  # its own totals, from zero


def test_gc_between_puts_each_process_s_pauses_under_its_group() -> None:
    cpu = proc.ProcessCPU
    before = {(1, 10): ([10, 1, 0], [1000, 500, 0]), (7, 20): ([5, 0, 0], [100, 0, 0])}
    after = {
        (1, 10): ([12, 1, 1], [1200, 500, 2_000_000_000]),  # a server that grew by one full collection
        (7, 20): ([9, 1, 1], [300, 100, 500_000_000]),  # the collector, gone by the snapshot
        (8, 21): ([3, 0, 0], [90, 0, 0]),  # a process started and gone within the window
        (9, 22): ([4, 0, 1], [40, 0, 250_000_000]),  # new since `before`: counted whole
    }
    processes = {(1, 10): cpu("m", "server mcqa", 0), (9, 22): cpu("m", "Ray", 0)}
    spent = proc.gc_between(before, after, processes, collector_pid=7)
    assert spent["server mcqa"] == {"collections": [2, 0, 1], "seconds": [200e-9, 0.0, 2.0]}
    assert spent["collector"] == {"collections": [4, 1, 1], "seconds": [200e-9, 100e-9, 0.5]}
    assert spent["exited"]["collections"] == [3, 0, 0]
    assert spent["Ray"] == {"collections": [4, 0, 1], "seconds": [40e-9, 0.0, 0.25]}
