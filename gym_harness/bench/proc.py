"""What the processes of a run spend, read from ``/proc`` and ``wait4``: CPU per process group, the
rest of the machine's CPU, the speed probe's samples, the garbage collector's pauses; and a run's
processes stopped (SIGSTOP) and resumed as one."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from gym_harness.processes import RUN_MARKER_VAR, E2EFailure, parent_pid, parse_stat, stopped, wait_for

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

STOP_TIMEOUT_SECONDS = 10.0  # SIGSTOP takes effect as each thread next runs: at once, unless the machine is very busy

BUSY_SAMPLE_SECONDS = 3.0


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def group_of(cmdline: list[str], cwd: str) -> str:
    """Which part of a run a process is: the name a CPU figure is reported under."""
    text = " ".join(cmdline)
    program = os.path.basename(cmdline[0]) if cmdline else "?"
    if program in ("bash", "sh"):
        return "shell wrappers"
    if "oteltap" in text:
        return "receiver"
    if "model_server.py" in text:
        return "model (scripted)"
    if cmdline and cmdline[-1].endswith("app.py"):
        return "server " + Path(cwd).name
    if "eval" in cmdline and "run" in cmdline:  # before Ray's: its command names the cluster, +ray_head_node_address=
        return "collector"
    if "ray" in text.lower():
        return "Ray"
    if "env" in cmdline and "start" in cmdline:
        return "gym env start (head)"
    return f"other ({program})"


@dataclass(frozen=True)
class ProcessCPU:
    marker: str
    group: str
    ticks: int  # own + reaped children's


def snapshot(markers: Set[str]) -> dict[tuple[int, int], ProcessCPU]:
    """Every live process of a run, keyed by (pid, start time): one whose environment carries a run
    marker, or whose parent's (or parent's parent's...) does. A process that rewrites its title can
    overwrite its environment as /proc shows it (Ray's ``ray::DashboardAgent`` sometimes does): without
    its ancestry it would vanish from the figures of one configuration and not another's."""
    needles = {f"{RUN_MARKER_VAR}={marker}".encode(): marker for marker in markers}
    seen: dict[int, tuple[str | None, int, int, int]] = {}  # pid: (marker, parent, ticks, start time)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
            own, children, started = parse_stat(stat)
            parent = parent_pid(stat)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or a zombie
        marker = next((needles[item] for item in environ if item in needles), None)
        seen[int(entry.name)] = (marker, parent, own + children, started)

    def marker_of(pid: int) -> str | None:
        for _ in range(64):  # a chain of parents, never a cycle, but bounded all the same
            if pid not in seen:
                return None
            marker, parent = seen[pid][0], seen[pid][1]
            if marker is not None:
                return marker
            pid = parent
        return None

    found: dict[tuple[int, int], ProcessCPU] = {}
    for pid, (_, _, ticks, started) in seen.items():
        marker = marker_of(pid)
        if marker is None:
            continue
        try:  # what it is, read for a run's processes only
            entry = Path("/proc") / str(pid)
            cmdline = [part.decode(errors="replace") for part in (entry / "cmdline").read_bytes().split(b"\0") if part]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue  # gone meanwhile
        found[(pid, started)] = ProcessCPU(marker, group_of(cmdline, cwd), ticks)
    return found


def signal_run(marker: str, signum: int) -> set[tuple[int, int]]:
    """Send ``signum`` to every live process of a run (as :func:`snapshot` finds them): the (pid, start time) signalled."""
    signalled = set()
    for pid, started in snapshot({marker}):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue  # gone meanwhile
        signalled.add((pid, started))
    return signalled


def freeze(marker: str) -> None:
    """Stop (SIGSTOP) every process of a run and wait until each one is stopped, until a pass finds none that
    was not stopped: a process that one of them started just before it stopped is found by the next pass."""
    signalled: set[tuple[int, int]] = set()
    for _ in range(20):
        found = signal_run(marker, signal.SIGSTOP)
        wait_for(
            f"run {marker}'s processes to stop",
            lambda found=found: all(stopped(pid) for pid, _ in found),
            timeout=STOP_TIMEOUT_SECONDS,
            interval=0.002,
        )
        if found <= signalled:
            return
        signalled |= found
    raise E2EFailure(f"run {marker}: its processes kept starting new ones; they could not all be stopped")


def thaw(marker: str) -> None:
    """Resume (SIGCONT) every process of a run; a stopped process starts nothing, so one pass reaches all."""
    signal_run(marker, signal.SIGCONT)


def cpu_between(before: dict[tuple[int, int], ProcessCPU], after: dict[tuple[int, int], ProcessCPU]) -> dict[str, Counter[str]]:
    """CPU seconds per marker and group from one snapshot to the next (a process new since `before` counts whole)."""
    spent: dict[str, Counter[str]] = {}
    for key, now in after.items():
        then = before.get(key)
        ticks = now.ticks - (then.ticks if then is not None else 0)
        spent.setdefault(now.marker, Counter())[now.group] += ticks / CLOCK_TICKS
    return spent


def others_cores(seconds: float = BUSY_SAMPLE_SECONDS) -> float:
    """The CPU the rest of the machine uses now, in cores (sampled over `seconds`, nothing of ours running)."""
    busy0, _ = machine_busy_ticks()
    own0 = time.process_time()
    time.sleep(seconds)
    busy1, _ = machine_busy_ticks()
    own = time.process_time() - own0
    return max(0.0, ((busy1 - busy0) / CLOCK_TICKS - own) / seconds)


def probe_mean(path: Path, start: float, end: float) -> float:
    """The speed probe's mean CPU microseconds per piece between two ``time.monotonic()`` readings (0: none)."""
    if not path.exists():
        return 0.0
    spent = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and start <= float(parts[0]) <= end:
            spent.append(int(parts[1]) / 1000)
    return statistics.mean(spent) if spent else 0.0


def wait_reaped(processes: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[tuple[int, float, float]]:
    """Wait for every process; each one's exit status, CPU seconds (its own and its reaped children's)
    and the ``time.perf_counter()`` at which it was seen gone."""
    deadline = time.monotonic() + timeout
    done: dict[int, tuple[int, float, float]] = {}
    while len(done) < len(processes):
        for index, process in enumerate(processes):
            if index in done:
                continue
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                done[index] = (process.returncode, usage.ru_utime + usage.ru_stime, time.perf_counter())
        if len(done) < len(processes):
            if time.monotonic() > deadline:
                raise E2EFailure(f"the collection did not finish in {timeout:.0f}s")
            time.sleep(0.02)
    return [done[index] for index in range(len(processes))]


def gc_pauses(folder: Path) -> dict[tuple[int, int], tuple[list[int], list[int]]]:
    """Each process's running totals as ``gc_hook.py`` last wrote them, keyed by (pid, start time):
    (collections, CPU nanoseconds), per generation."""
    found: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for path in folder.glob("[0-9]*-[0-9]*.json"):
        try:
            pid, started = (int(part) for part in path.stem.split("-"))
            data = json.loads(path.read_text())
            found[(pid, started)] = ([int(n) for n in data["collections"]], [int(n) for n in data["cpu_ns"]])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # replaced meanwhile (the hook writes whole files) or not the hook's
    return found


def gc_between(
    before: dict[tuple[int, int], tuple[list[int], list[int]]],
    after: dict[tuple[int, int], tuple[list[int], list[int]]],
    processes: dict[tuple[int, int], ProcessCPU],
    collector_pid: int,
) -> dict[str, dict[str, list[float]]]:
    """The pauses per group from one reading to the next, each process under the group :func:`snapshot`
    found it in; the collector (gone by then) by its pid, other processes gone by then as ``exited``."""
    spent: dict[str, dict[str, list[float]]] = {}
    for key, (collections, cpu_ns) in after.items():
        then_collections, then_ns = before.get(key, ([0, 0, 0], [0, 0, 0]))
        known = processes.get(key)
        group = known.group if known is not None else "collector" if key[0] == collector_pid else "exited"
        mine = spent.setdefault(group, {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0]})
        for generation in range(3):
            mine["collections"][generation] += collections[generation] - then_collections[generation]
            mine["seconds"][generation] += (cpu_ns[generation] - then_ns[generation]) / 1e9
    return spent
