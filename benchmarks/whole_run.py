"""What a whole real run costs (issue 14): ``make bench-e2e`` runs real NeMo Gym 0.7.0 collections three ways.

    python3 benchmarks/whole_run.py                 # 100 tasks x 4 repeats, concurrency 64, 18 rounds in 3 blocks
    python3 benchmarks/whole_run.py --quick         # 4 tasks x 2, 1 round: proves the harness runs
    python3 benchmarks/whole_run.py --profile       # yappi in every Gym server for one round per configuration
    python3 benchmarks/whole_run.py --force         # run on a busy machine (the results say so)

The three configurations, each with its own receiver, scripted model, Ray cluster (``ray start``
under the configuration's launcher, on ports of its own, given to NeMo Gym as
``ray_head_node_address``) and ``gym env start`` (its own servers), all started before a block's
first round and kept for its rounds, but each running only for its own collections: the others'
processes are stopped (SIGSTOP) meanwhile, so that their idle Ray clusters and servers take no CPU
from it, as on a machine that runs one pipeline. Every block starts them all afresh: where one
instance's memory and threads landed stays with it for as long as it runs, so one block alone
can put a configuration above its twin; over blocks that averages out. The configurations:

- ``none``: plain ``gym``, no launcher;
- ``contrib``: ``opentelemetry-instrument`` with this package disabled
  (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=gym``): the FastAPI and aiohttp-client spans;
- ``full``: ``opentelemetry-instrument`` with this package's default preset.

Per configuration and block one untimed warm-up collection, then rounds in which every
configuration collects once, the rounds taking every order of the configurations in turn (each
runs in every position and directly after each other equally often). Per collection: the collector's wall time (start to
exit of ``gym eval run --no-serve``) and the CPU time of every process of the configuration (the
collector from ``wait4``; the servers, Ray's processes, the model and the receiver from
``/proc/<pid>/stat``, utime + stime + reaped children's, after minus before), and the spans the
receiver got per rollout, by name. Ratios are taken within a round (contrib / none, full / contrib)
and the table gives their min / median / max over rounds. Every configuration must write the same
rows with the same rewards per task in the same round (the scripted model's answers depend only on
how often it has seen a prompt); a difference fails the run.

The machine itself changes speed from one collection to the next: on a shared host a virtual CPU
runs the same instructions up to twice as slowly while a neighbour has its core's other
hyperthread, and every process of a collection slows together (an A/A run, contrib given full's
configuration, spread its rounds' ratio by 8% and put one twin 4% above the other over 11 rounds).
``speed_probe.py`` runs beside the whole run, outside every configuration, timing the same small
piece of Python every 50 ms; each collection gets the probe's mean over its window. The report
fits how the collections' wall and CPU follow it (each against its configuration's mean, in logs)
and judges the goal twice: on the raw ratios, and on each round's ratio divided by its two
collections' probe ratio to the fitted power.

The garbage collector is the other lump: a full collection of a server's or the collector's heap
takes a fifth of a second or more here, and one more or fewer inside a collection's window moves its
CPU by a percent. ``gc_hook.py``, installed in the venv for the run (a ``.pth`` start-up hook, inert
without ``GYM_BENCH_GC_DIR``), counts every process's pauses in every configuration alike; the report
gives them per group and the package's share outside them.

After the rounds, ``span_price.py`` (in the same venv) prices what SPEC requires of the package
alone: full's first timed round's spans made again with the SDK, with the package's spans and
without, and the baggage entry through the configured propagator; the report sets the package's
share beside that price.

Ray's dashboard polls ``/api/healthz`` through the instrumented aiohttp client under the launcher:
``OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS=/api/healthz`` keeps those spans out, as in ``make e2e``.

The machine must be quiet: before the first round the other processes' CPU is sampled, and the run
refuses when it is above ``--max-busy`` cores (``--force`` runs anyway and marks the results). The
other processes' CPU during every round is measured too and reported.

Reuses ``make e2e``'s venv (``.venv-e2e-070``, built when missing) and scripted model; standard
library only, any Python 3.10+. Results: the ``whole_run`` section of benchmarks/RESULTS.md (``make
bench`` keeps it); logs of the last run in ``.e2e-work/bench-e2e/``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import json
import math
import os
import platform
import pstats
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
E2E_DIR = REPO / "e2e"
sys.path.insert(0, str(E2E_DIR))

from otlp_json import span_objects, wait_quiet  # noqa: E402
from processes import (  # noqa: E402
    RUN_MARKER_VAR,
    E2EFailure,
    Processes,
    exited,
    free_port,
    log,
    parent_pid,
    parse_stat,
    port_open,
    run_main,
    stopped,
    wait_for,
)
from releases import RELEASES  # noqa: E402

sys.path.insert(0, str(HERE))
from sections import (  # noqa: E402
    WHOLE_RUN,
    WHOLE_RUN_DROP_OURS,
    WHOLE_RUN_NO_BAGGAGE,
    WHOLE_RUN_PROFILE,
    WHOLE_RUN_TOGETHER,
    Section,
    code_version,
)


def _load_e2e_run() -> Any:
    # e2e/run.py, under a name of its own: benchmarks/run.py is `run` on this script's path.
    spec = importlib.util.spec_from_file_location("e2e_run", E2E_DIR / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["e2e_run"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


e2e_run = _load_e2e_run()

RELEASE = next(release for release in RELEASES if release.version == "0.7.0")
WORK_ROOT = REPO / ".e2e-work" / "bench-e2e"
WORK = WORK_ROOT / "timed"  # run() points it at WORK_ROOT / "profile" for --profile
CONFIGURATIONS = ("none", "contrib", "full")
# What the mcqa collection needs: its resources server, agent and environment server, and the model server.
GYM_CONFIGS = ("resources_servers/mcqa/configs/mcqa.yaml", "responses_api_models/openai_model/configs/openai_model.yaml")
SERVER_DIRS = (
    "resources_servers/mcqa",
    "responses_api_agents/simple_agent",
    "responses_api_models/openai_model",
    "environment_servers/legacy_agent",
)
EXPECTED_SERVERS = 4
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# After the collector exits, before the CPU is read: each server's batch span processor sends its last
# (short of a full batch) spans only after its schedule delay, 5 s by default; the same wait for every
# configuration, so that export and its receipt are inside the window.
SETTLE_SECONDS = 5.5
# While one configuration collects, the others' processes are stopped (SIGSTOP): their idle Ray
# clusters and servers would otherwise take CPU from it at random. Resumed, a configuration gets
# this long before its CPU is first read, for the timers that came due while it was stopped.
THAW_SECONDS = 2.0
STOP_TIMEOUT_SECONDS = 10.0  # SIGSTOP takes effect as each thread next runs: at once, unless the machine is very busy
TIMEOUT_SERVERS_READY = 300
TIMEOUT_COLLECTION = 900
BUSY_SAMPLE_SECONDS = 3.0

SAMPLER_MODULE = "gym_bench_drop_ours"  # benchmarks/drop_ours_sampler.py in the venv, for --drop-ours
SAMPLER_DIST = f"{SAMPLER_MODULE}-0.dist-info"


@dataclass(frozen=True)
class Variant:
    """A diagnostic run in which full's processes get these variables (issue 14's point 3: a part of the
    cost measured apart); its report goes into a section of its own, the default runs' stay as they are."""

    flag: str  # on the command line, --<flag>
    env: tuple[tuple[str, str], ...]
    what: str  # added to full's "what runs" cell
    heading: str
    section: Section
    sampler: bool = False  # needs drop_ours_sampler.py's entry point in the venv


VARIANTS = {
    variant.flag: variant
    for variant in (
        Variant(
            "no-baggage",
            (("OTEL_PYTHON_GYM_BAGGAGE", "false"),),
            "`OTEL_PYTHON_GYM_BAGGAGE=false` (the rollout id kept in-process)",
            "Baggage kept in-process: full with `OTEL_PYTHON_GYM_BAGGAGE=false`",
            WHOLE_RUN_NO_BAGGAGE,
        ),
        Variant(
            "drop-ours",
            (("OTEL_TRACES_SAMPLER", SAMPLER_MODULE),),
            "the SDK dropping the package's spans (`benchmarks/drop_ours_sampler.py`)",
            "The package's spans dropped by the SDK: its own work apart from OpenTelemetry's",
            WHOLE_RUN_DROP_OURS,
            sampler=True,
        ),
    )
}
GOAL = 1.02  # issue 14: full / contrib, wall time and CPU of all processes, median over rounds
BOOTSTRAP_RESAMPLES = 4000
SPEED_SAMPLES = "speed.txt"  # benchmarks/speed_probe.py's samples, in WORK
PROFILE_HOOK = "_gym_bench_profile_hook"
GC_HOOK = "_gym_bench_gc_hook"  # benchmarks/gc_hook.py in the venv: every process counts its GC pauses
GC_DIR_VAR = "GYM_BENCH_GC_DIR"


@dataclass(frozen=True)
class Workload:
    tasks: int
    repeats: int
    concurrency: int
    rounds: int
    warmup: bool = True
    blocks: int = 1  # the rounds in this many blocks, each with every configuration started afresh
    together: bool = False  # every configuration of a round collects at the same moment, not one after another
    variant: str | None = None  # a key of VARIANTS: full's processes get its variables

    @property
    def rollouts(self) -> int:
        return self.tasks * self.repeats


FULL = Workload(tasks=100, repeats=4, concurrency=64, rounds=18, blocks=3)
QUICK = Workload(tasks=4, repeats=2, concurrency=4, rounds=1, warmup=False)


# ---------------------------------------------------------------------------------------------
# /proc: CPU of processes and of the machine
# ---------------------------------------------------------------------------------------------


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


def start_speed_probe(processes: Processes) -> subprocess.Popen[bytes]:
    """``speed_probe.py`` for the whole run, on this interpreter, outside every configuration (no marker)."""
    path = WORK / SPEED_SAMPLES
    path.touch()
    command = [sys.executable, str(HERE / "speed_probe.py"), str(path)]
    return processes.start("speed probe", command, WORK / "speed_probe.log", WORK)


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


# ---------------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------------

LETTERS = "ABCD"


def write_tasks(path: Path, tasks: int) -> Path:
    """`tasks` distinct mcqa rows (flat, each with its `agent_ref` and a string `task_id`)."""
    rows = []
    for index in range(tasks):
        options = [{letter: f"option {letter.lower()} of question {index}"} for letter in LETTERS]
        question = f"Synthetic question {index}: which option is the one marked correct for this question?"
        listing = "\n".join(f"{letter}: {text}" for option in options for letter, text in option.items())
        prompt = (
            "You should output your final response letter inside \\boxed{} and nothing else You can first think "
            f"step-by-step. {question}\n{listing}"
        )
        rows.append(
            {
                "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
                "options": options,
                "expected_answer": LETTERS[index % len(LETTERS)],
                "grading_mode": "strict_single_letter_boxed",
                "uuid": f"bench-{index:04d}",
                "agent_ref": {"name": "mcqa_simple_agent"},
                "task_id": f"bench-task-{index}",
            }
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def rollout_outcomes(rows: list[dict[str, Any]]) -> dict[int, list[float | None]]:
    """Per task index, the sorted rewards of its rollouts: what must be the same in every configuration."""
    by_task: dict[int, list[float | None]] = {}
    for row in rows:
        by_task.setdefault(int(row["_ng_task_index"]), []).append(row.get("reward"))
    return {task: sorted(rewards, key=lambda r: (r is None, r)) for task, rewards in sorted(by_task.items())}


def compare_outcomes(outcomes: dict[str, dict[int, list[float | None]]]) -> list[str]:
    """What differs between the configurations' outcomes of one round (empty when they agree)."""
    problems = []
    names = list(outcomes)
    reference = outcomes[names[0]]
    for name in names[1:]:
        other = outcomes[name]
        if set(other) != set(reference):
            problems.append(f"{name} wrote rows for tasks {sorted(set(other) ^ set(reference))} that {names[0]} did not")
        for task in sorted(set(other) & set(reference)):
            if other[task] != reference[task]:
                problems.append(f"task {task}: {names[0]} rewards {reference[task]}, {name} {other[task]}")
    return problems


# ---------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------


@dataclass
class Configuration:
    name: str
    marker: str
    work: Path
    env: dict[str, str]
    launcher: list[str]
    processes: Processes
    receiver_port: int = 0
    head_port: int = 0
    ray_address: str = ""  # its own Ray cluster's, from `ray start`
    capture_dir: Path = Path()
    spans_path: Path = Path()
    span_offsets: list[int] = field(default_factory=list)  # receiver output size at each timed round's start

    @property
    def gc_dir(self) -> Path:
        """Where every process of the configuration writes its GC pauses (benchmarks/gc_hook.py)."""
        return self.work / "gc"

    @property
    def head(self) -> list[str]:
        return [
            "+head_server.host=127.0.0.1",
            f"+head_server.port={self.head_port}",
            f"+ray_head_node_address={self.ray_address}",
        ]

    @property
    def capture(self) -> list[str]:
        return ["+observability_enabled=true", f"+model_call_capture_dir={self.capture_dir}"]


def configuration_env(name: str, base: dict[str, str], variant: str | None = None) -> dict[str, str]:
    """The environment of a configuration's processes; a variant's variables go to full's alone."""
    env = dict(base)
    # The SDK's own export settings (the e2e shortens them to see spans quickly; a user has these).
    for variable in ("OTEL_BSP_SCHEDULE_DELAY", "OTEL_METRIC_EXPORT_INTERVAL"):
        env.pop(variable, None)
    if name == "none":
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    elif name == "contrib":
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "gym"
    elif variant is not None:
        env.update(VARIANTS[variant].env)
    return env


def start_configuration(
    name: str,
    work: Path,
    venv_python: Path,
    scratch: Any,
    tasks_path: Path,
    profile_dir: Path | None,
    started: dict[str, Configuration],
    variant: str | None = None,
) -> Configuration:
    """Start the configuration's receiver, model and servers, its files in `work`; it is in `started`
    before its first process."""
    marker = uuid.uuid4().hex
    work.mkdir(parents=True)
    receiver_port = free_port()
    env = configuration_env(name, e2e_run.base_env(RELEASE.venv, marker, receiver_port, scratch), variant)
    if profile_dir is not None:
        env["GYM_BENCH_PROFILE_DIR"] = str(profile_dir / name)
        env["GYM_BENCH_PROFILE_MATCH"] = "app.py,eval run"  # the Gym servers and the collector
        (profile_dir / name).mkdir(parents=True)
    bin_dir = RELEASE.venv / "bin"
    launcher = [] if name == "none" else [str(bin_dir / "opentelemetry-instrument"), "--"]
    config = Configuration(name, marker, work, env, launcher, Processes(env), receiver_port, free_port())
    env[GC_DIR_VAR] = str(config.gc_dir)  # every process of the configuration, the receiver's and model's too
    config.gc_dir.mkdir()
    started[name] = config  # stopped in run()'s `finally`, whatever happens from here on
    config.capture_dir = work / "model-calls"
    config.capture_dir.mkdir()
    config.spans_path = work / "received.ndjson"
    plain_env = {k: v for k, v in env.items() if not k.startswith(("OTEL_", "GYM_BENCH_PROFILE"))}

    receiver = config.processes.start(
        f"{name}: oteltap", [str(bin_dir / "oteltap"), "--port", str(receiver_port)], config.spans_path, work, plain_env
    )
    wait_for("the OTLP receiver", lambda: port_open(receiver_port), 30, exited(receiver, "oteltap", config.spans_path))
    model_port_file = work / "model_server.port"
    model_log = work / "model_server.log"
    model = config.processes.start(
        f"{name}: model server",
        [str(venv_python), str(E2E_DIR / "model_server.py"), "--answers", str(tasks_path), "--port-file", str(model_port_file)],
        model_log,
        work,
        plain_env,
    )
    wait_for("the model server's port", model_port_file.exists, 30, exited(model, "model server", model_log))
    model_port = int(model_port_file.read_text())

    # Each configuration's own Ray cluster, on ports of its own. `gym env start` would start one itself
    # with `ray.init()`, whose dashboard agent always listens on 52365: of three clusters on one machine,
    # only the agent that binds first serves HTTP (the others log "address already in use" and run on
    # without it), so the configurations' Ray clusters did different work. Started under the
    # configuration's launcher, as `gym env start` would start it.
    ray_port = free_port()
    ray_log = work / "ray_start.log"
    ray_start = config.processes.start(
        f"{name}: ray start",
        [
            *launcher,
            str(bin_dir / "ray"),
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={ray_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--disable-usage-stats",  # as `ray.init()` sets for a released wheel
        ],
        ray_log,
        work,
        {**env, "RAY_AUTH_MODE": "disabled"},  # `ray start` turns token auth on; a `ray.init()` cluster has none
    )
    [(code, _, _)] = wait_reaped([ray_start], TIMEOUT_SERVERS_READY)
    if code != 0:
        raise E2EFailure(f"{name}: ray start failed (exit {code}); log: {ray_log}\n{e2e_run.tail(ray_log)}")
    config.ray_address = f"127.0.0.1:{ray_port}"

    gym_site = e2e_run.site_packages(venv_python)
    venvs_root = work / "server-venvs"
    for server_dir in SERVER_DIRS:
        (venvs_root / server_dir).mkdir(parents=True)
        (venvs_root / server_dir / ".venv").symlink_to(RELEASE.venv, target_is_directory=True)
    configs = [arg for path in GYM_CONFIGS for arg in ("--config", str(gym_site / path))]
    env_log = work / "gym_env_start.log"
    env_start = config.processes.start(
        f"{name}: gym env start",
        [
            *launcher,
            str(bin_dir / "gym"),
            "env",
            "start",
            *configs,
            f"+policy_base_url=http://127.0.0.1:{model_port}/v1",
            "+policy_api_key=bench-dummy-key",
            "+policy_model_name=scripted-model",
            "+skip_venv_if_present=true",
            f"+uv_venv_dir={venvs_root}",
            *config.head,
            *config.capture,
        ],
        env_log,
        work,
    )
    ready = re.compile(r"All (\d+) / (\d+) servers ready")

    def servers_ready() -> bool:
        match = ready.search(env_log.read_text(errors="replace")) if env_log.exists() else None
        if match and match.group(1) != match.group(2):
            raise E2EFailure(f"NeMo Gym reported {match.group(0)}; log: {env_log}")
        return bool(match)

    wait_for(
        f"{name}: `All N / N servers ready`", servers_ready, TIMEOUT_SERVERS_READY, exited(env_start, "gym env start", env_log)
    )
    count = int(ready.search(env_log.read_text(errors="replace")).group(1))  # type: ignore[union-attr]
    if count != EXPECTED_SERVERS:
        raise E2EFailure(f"{name}: expected {EXPECTED_SERVERS} servers, gym env start started {count}; log: {env_log}")
    log(f"{name}: {count} servers ready")
    return config


# ---------------------------------------------------------------------------------------------
# One collection
# ---------------------------------------------------------------------------------------------


@dataclass
class Collection:
    configuration: str
    round: int
    rollouts: int
    wall: float
    cpu: Counter[str]  # seconds per group, this configuration's processes
    others: float  # the rest of the machine, in cores, over the collection
    outcomes: dict[int, list[float | None]]
    verdicts: Counter[str]
    speed: float = 0.0  # the speed probe's mean CPU us per piece over the CPU window (0: no samples)
    # The garbage collector's pauses per group over the CPU window: {"collections": [g0, g1, g2], "seconds": [...]}
    gc: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    block: int = 1  # the block of rounds (each with its configurations started afresh) it ran in

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())

    @property
    def cpu_without_receiver(self) -> float:
        """What the user's own machines spend: the receiver stands for their tracing backend."""
        return self.cpu_total - self.cpu.get("receiver", 0.0)


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


def round_orders(names: Sequence[str], rounds: int) -> list[tuple[str, ...]]:
    """Each round's order: every order of the configurations in turn. Over each full turn every
    configuration runs in every position, and runs directly after each other one, equally often (a
    rotation runs `full` right after `contrib` in two rounds of three and never the other way round)."""
    orders = list(itertools.permutations(names))
    return [orders[number % len(orders)] for number in range(rounds)]


def blocks_of(rounds: int, blocks: int) -> list[list[int]]:
    """The round numbers (from 1) of each block, in order, as even as they divide."""
    count = max(1, min(blocks, rounds))
    return [[n for n in range(1, rounds + 1) if (n - 1) * count // rounds == b] for b in range(count)]


@dataclass(frozen=True)
class Shared:
    """What every collection of a block of rounds shares: the tasks, the workload, and the run markers of
    every configuration of the block (whose processes' CPU is read)."""

    tasks_path: Path
    workload: Workload
    markers: frozenset[str]


def collect(
    configs: Sequence[Configuration],
    round_label: str,
    round_number: int,
    shared: Shared,
) -> list[Collection]:
    """One collection of each of ``configs``, their collectors started at the same moment (one after
    the other, in order, a few milliseconds apart): one configuration alone, or all of them together."""
    tasks_path, workload, markers = shared.tasks_path, shared.workload, shared.markers
    bin_dir = RELEASE.venv / "bin"
    commands = []
    for config in configs:
        out = config.work / round_label
        out.mkdir()
        for capture in config.capture_dir.iterdir():  # NeMo Gym appends to a rollout id's capture: one round's only
            capture.unlink()
        commands.append(
            [
                *config.launcher,
                str(bin_dir / "gym"),
                "eval",
                "run",
                "--no-serve",
                f"+input_jsonl_fpath={tasks_path}",
                f"+output_jsonl_fpath={out / 'rollouts.jsonl'}",
                f"+num_repeats={workload.repeats}",
                f"+num_samples_in_parallel={workload.concurrency}",
                *config.head,
                *config.capture,
            ]
        )
    before = snapshot(markers)
    pauses_before = [gc_pauses(config.gc_dir) for config in configs]
    busy_before, _ = machine_busy_ticks()
    own_before = time.process_time()
    window_start = time.monotonic()
    started = time.perf_counter()
    processes = [
        config.processes.start(
            f"{config.name}: gym eval run ({round_label})",
            command,
            config.work / round_label / "gym_eval_run.log",
            config.work / round_label,
        )
        for config, command in zip(configs, commands, strict=True)
    ]
    reaped = wait_reaped(processes, TIMEOUT_COLLECTION)
    time.sleep(SETTLE_SECONDS)
    after = snapshot(markers)
    pauses = [
        gc_between(then, gc_pauses(config.gc_dir), after, process.pid)
        for config, then, process in zip(configs, pauses_before, processes, strict=True)
    ]
    busy_after, _ = machine_busy_ticks()
    elapsed = time.perf_counter() - started
    speed = probe_mean(WORK / SPEED_SAMPLES, window_start, time.monotonic())
    for config, (code, _, _) in zip(configs, reaped, strict=True):
        if code != 0:
            log_path = config.work / round_label / "gym_eval_run.log"
            raise E2EFailure(f"{config.name}: the collection failed (exit {code}); log: {log_path}\n{e2e_run.tail(log_path)}")
    spent = cpu_between(before, after)
    collectors = sum(cpu for _, cpu, _ in reaped)
    ours = sum(sum(groups.values()) for groups in spent.values()) + collectors + time.process_time() - own_before
    others = max(0.0, ((busy_after - busy_before) / CLOCK_TICKS - ours) / elapsed)

    collections = []
    for config, (_, collector_cpu, ended), gc in zip(configs, reaped, pauses, strict=True):
        out = config.work / round_label
        rollouts_path = out / "rollouts.jsonl"
        wall = ended - started
        cpu = spent.get(config.marker, Counter())
        cpu["collector"] += collector_cpu
        rows = e2e_run.read_jsonl(rollouts_path)
        failures = e2e_run.read_jsonl(rollouts_path.with_name("rollouts_failures.jsonl"))
        if failures or len(rows) != workload.rollouts:
            raise E2EFailure(
                f"{config.name}: {len(rows)} rows and {len(failures)} failures for {workload.rollouts} rollouts; "
                f"log: {out / 'gym_eval_run.log'}"
            )
        verdicts = Counter(
            str(row.get("verdict")) for row in e2e_run.read_jsonl(rollouts_path.with_name("rollout_verdicts.jsonl"))
        )
        log(
            f"{config.name} {round_label}: {wall:.2f} s wall, {sum(cpu.values()):.2f} s CPU "
            f"(collector {cpu['collector']:.2f} s), others {others:.2f} cores, speed probe {speed:.0f} us"
        )
        collections.append(
            Collection(config.name, round_number, len(rows), wall, cpu, others, rollout_outcomes(rows), verdicts, speed, gc)
        )
    return collections


def spans_by_name(path: Path, start: int, end: int | None) -> Counter[str]:
    """Span names in the receiver's output between two byte offsets (metrics are skipped unparsed)."""
    return Counter(obj.get("name", "") for obj in span_objects(path, start, end))


# ---------------------------------------------------------------------------------------------
# The profile: where the servers' CPU goes
# ---------------------------------------------------------------------------------------------

# (category, path fragments), first match wins; a function's own time (no double counting).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gym_instrument (the package's own code)", ("/gym_instrument/",)),
    ("wrapt", ("/wrapt/",)),
    ("propagation (baggage, W3C trace context)", ("/opentelemetry/propagat", "/opentelemetry/baggage/", "/trace/propagation/")),
    ("attribute cleaning", ("/opentelemetry/attributes/",)),
    ("context (attach, detach, get)", ("/opentelemetry/context/",)),
    (
        "SDK span creation and processing",
        ("/opentelemetry/sdk/trace/", "/opentelemetry/sdk/resources/", "/opentelemetry/sdk/util/"),
    ),
    ("SDK metrics", ("/opentelemetry/sdk/metrics/",)),
    (
        "export (OTLP encoding and HTTP)",
        ("/opentelemetry/exporter/", "/opentelemetry/proto/", "/google/protobuf/", "/requests/", "/urllib3/"),
    ),
    ("FastAPI / ASGI instrumentation", ("/instrumentation/fastapi/", "/instrumentation/asgi/")),
    ("aiohttp-client instrumentation", ("/instrumentation/aiohttp_client/",)),
    ("OpenTelemetry API and utilities (other)", ("/opentelemetry/",)),
)
OTHER = "NeMo Gym, FastAPI, uvicorn, aiohttp, Python (the work itself)"


def category_of(filename: str) -> str:
    for category, fragments in CATEGORIES:
        if any(fragment in filename for fragment in fragments):
            return category
    return OTHER


@dataclass
class Profile:
    """One configuration's yappi profile of its Gym servers over one collection, per rollout."""

    configuration: str
    rollouts: int
    by_server: dict[str, float]  # CPU ms per rollout, all functions' own time
    by_category: dict[str, float]  # CPU ms per rollout, all servers
    package_entries: dict[str, float]  # inclusive CPU ms per rollout of calls from the package into OpenTelemetry
    # The package's functions: (own CPU ms, inclusive CPU ms, calls) per rollout, largest own time first.
    package_functions: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    gc_collections: list[int] = field(default_factory=lambda: [0, 0, 0])  # all servers, per generation
    gc_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # CPU ms per rollout, per generation
    # Python calls per rollout, all servers, by category: yappi counts them exactly, whatever the machine's speed.
    calls_by_category: dict[str, float] = field(default_factory=dict)
    part: str = "servers"  # or "collector": the same figures for `gym eval run` alone


def slots(configs: dict[str, Configuration], order: Sequence[str], together: bool) -> list[list[Configuration]]:
    """A round's collections: alone, one slot per configuration in the round's order; together, one for all."""
    running = [configs[name] for name in order]
    return [running] if together else [[config] for config in running]


def collect_running(
    configs: Sequence[Configuration],
    round_label: str,
    round_number: int,
    shared: Shared,
    profile_dir: Path | None = None,
    profiles: list[Profile] | None = None,
) -> list[Collection]:
    """One collection of each of ``configs`` with only their processes running: resumed, given THAW_SECONDS,
    collected (profiled, with ``profile_dir``: the servers' profiles are appended to ``profiles``), and stopped."""
    for config in configs:
        thaw(config.marker)
    try:
        time.sleep(THAW_SECONDS)
        if profile_dir is not None:
            for config in configs:
                (profile_dir / config.name / "start").touch()
            time.sleep(0.5)
        collections = collect(configs, round_label, round_number, shared)
        if profile_dir is not None and profiles is not None:
            for config, collection in zip(configs, collections, strict=True):
                (profile_dir / config.name / "stop").touch()  # each server writes <pid>.pstat, then <pid>.json
                wait_for(  # the collector has written its own at its exit
                    f"{config.name}: the servers' and the collector's profiles",
                    lambda d=profile_dir / config.name: len(list(d.glob("*.json"))) >= EXPECTED_SERVERS + 1,
                    60,
                )
                for part in ("servers", "collector"):
                    profiles.append(read_profiles(profile_dir / config.name, config.name, collection.rollouts, part))
        return collections
    finally:
        for config in configs:
            freeze(config.marker)


def read_profiles(folder: Path, configuration: str, rollouts: int, part: str = "servers") -> Profile:
    """One configuration's profiles of one part of the run: its Gym servers, or its collector (by ``group_of``)."""
    by_server: Counter[str] = Counter()
    by_category: Counter[str] = Counter()
    calls_by_category: Counter[str] = Counter()
    entries: Counter[str] = Counter()
    package_own: Counter[str] = Counter()
    package_inclusive: Counter[str] = Counter()
    package_calls: Counter[str] = Counter()
    gc_collections, gc_seconds = [0, 0, 0], [0.0, 0.0, 0.0]
    for meta_path in sorted(folder.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        if (group_of(meta["cmdline"], meta["cwd"]) == "collector") != (part == "collector"):
            continue
        for generation in range(3):
            gc_collections[generation] += meta.get("gc_collections", [0, 0, 0])[generation]
            gc_seconds[generation] += meta.get("gc_seconds", [0.0, 0.0, 0.0])[generation]
        stats_path = meta_path.with_suffix(".pstat")
        if not stats_path.exists():
            continue
        server = Path(meta["cwd"]).name
        raw = pstats.Stats(str(stats_path)).stats  # type: ignore[attr-defined]
        for (filename, _line, function), (_cc, calls, own, cumulative, callers) in raw.items():
            category = category_of(filename)
            by_server[server] += own
            by_category[category] += own
            calls_by_category[category] += calls
            if "/gym_instrument/" in filename:
                name = f"{Path(filename).name}:{function}"
                package_own[name] += own
                package_inclusive[name] += cumulative
                package_calls[name] += calls
            if category.startswith(("gym_instrument", "wrapt")):
                continue
            if "/opentelemetry/" not in filename:
                continue
            for caller, edge in callers.items():
                if "/gym_instrument/" in caller[0]:
                    entries[f"{Path(caller[0]).name}:{caller[2]} -> {_short(filename)}:{function}"] += edge[3]
    scale = 1000.0 / max(rollouts, 1)
    return Profile(
        configuration,
        rollouts,
        {k: v * scale for k, v in by_server.items()},
        {k: v * scale for k, v in by_category.items()},
        {k: v * scale for k, v in entries.most_common(12)},
        {
            name: (own * scale, package_inclusive[name] * scale, package_calls[name] / max(rollouts, 1))
            for name, own in package_own.most_common(15)
        },
        gc_collections,
        [seconds * scale for seconds in gc_seconds],
        {k: v / max(rollouts, 1) for k, v in calls_by_category.items()},
        part,
    )


def _short(filename: str) -> str:
    marker = "/site-packages/"
    return filename.split(marker, 1)[1] if marker in filename else Path(filename).name


def _remove_module(site: Path, module: str) -> None:
    """``<module>.py`` out of ``site``, with the bytecode an interpreter may have cached of it."""
    (site / f"{module}.py").unlink(missing_ok=True)
    for cached in (site / "__pycache__").glob(f"{module}.*.pyc"):
        cached.unlink(missing_ok=True)


def install_hook(site: Path, module: str, source: str) -> None:
    """``benchmarks/<source>`` as ``<module>`` in the NeMo Gym venv's ``site``, imported by every interpreter's
    start-up (a ``.pth``)."""
    shutil.copy(HERE / source, site / f"{module}.py")
    (site / f"{module}.pth").write_text(f"import {module}\n")


def remove_hook(site: Path, module: str) -> None:
    (site / f"{module}.pth").unlink(missing_ok=True)
    _remove_module(site, module)


def install_sampler(site: Path) -> None:
    """``drop_ours_sampler.py`` in ``site`` with the ``opentelemetry_traces_sampler`` entry point the SDK
    looks up for ``OTEL_TRACES_SAMPLER=gym_bench_drop_ours``."""
    shutil.copy(HERE / "drop_ours_sampler.py", site / f"{SAMPLER_MODULE}.py")
    dist = site / SAMPLER_DIST
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {SAMPLER_MODULE}\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[opentelemetry_traces_sampler]\n{SAMPLER_MODULE} = {SAMPLER_MODULE}:sampler\n")


def remove_sampler(site: Path) -> None:
    """The sampler's files out of ``site`` again, the bytecode an interpreter cached of it included."""
    shutil.rmtree(site / SAMPLER_DIST, ignore_errors=True)
    _remove_module(site, SAMPLER_MODULE)


# ---------------------------------------------------------------------------------------------
# The garbage collector's pauses (benchmarks/gc_hook.py in every process)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Figures and the report
# ---------------------------------------------------------------------------------------------


def spread(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A percentile-bootstrap interval of the median of ``values`` (rounds resampled with replacement,
    a fixed seed: the same rounds give the same interval). It says how far the median of this many
    rounds moves with the round-to-round noise of a shared machine."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(BOOTSTRAP_RESAMPLES))
    low = medians[int((1 - level) / 2 * BOOTSTRAP_RESAMPLES)]
    high = medians[min(int((1 + level) / 2 * BOOTSTRAP_RESAMPLES), BOOTSTRAP_RESAMPLES - 1)]
    return low, high


def goal_line(collections: list[Collection]) -> list[str]:
    """Issue 14's goal, judged on the medians, with how precisely this run's rounds pin each median down;
    and judged again on the rounds' ratios adjusted for the machine's speed (:func:`speed_fit`)."""
    lines = []
    for adjusted in (False, True):
        parts = []
        for what, label in (("wall", "wall time"), ("cpu", "CPU of all processes")):
            fit = speed_fit(collections, what) if adjusted else None
            if adjusted and fit is None:
                return lines
            values = ratios(collections, "full", "contrib", what, fit)
            if not values:
                return lines
            median = statistics.median(values)
            low, high = median_interval(values)
            verdict = "met" if median <= GOAL else "**NOT met**"
            parts.append(f"{label} {median:.3f} ({verdict}; 95% interval of the median {low:.3f} to {high:.3f})")
        rounds = len(ratios(collections, "full", "contrib", "wall"))
        if not adjusted:
            lines.append(
                f"**Goal: full / contrib <= {GOAL:.2f}**, the median of {rounds} rounds' ratios: " + "; ".join(parts) + ". "
                "The interval is a bootstrap over the rounds: where the median of as many rounds lands with this run's "
                "round-to-round spread."
            )
        else:
            lines += ["", "**The same rounds adjusted for the machine's speed** (below): " + "; ".join(parts) + "."]
    return lines


@dataclass(frozen=True)
class SpeedFit:
    """How a collection's wall or CPU time follows the speed probe over its window."""

    slope: float  # d log(value) / d log(probe's time per piece)
    correlation: float
    collections: int
    spread: tuple[float, float]  # the probe's lowest and highest collection mean, us per piece


def speed_fit(collections: list[Collection], what: str) -> SpeedFit | None:
    """The least-squares slope of log(value) on log(probe), each collection against its configuration's mean
    of logs (the configurations differ in their work, not in the machine they run on); None without probe
    samples for every collection or with too few collections."""
    if not collections or any(c.speed <= 0 for c in collections):
        return None
    xs: list[float] = []
    ys: list[float] = []
    for name in CONFIGURATIONS:
        mine = [c for c in collections if c.configuration == name]
        if len(mine) < 2:
            continue
        x = [math.log(c.speed) for c in mine]
        y = [math.log(value_of(c, what)) for c in mine]
        xs += [v - statistics.mean(x) for v in x]
        ys += [v - statistics.mean(y) for v in y]
    sxx = sum(v * v for v in xs)
    syy = sum(v * v for v in ys)
    if len(xs) < 4 or sxx <= 0 or syy <= 0:
        return None
    sxy = sum(a * b for a, b in zip(xs, ys, strict=True))
    speeds = [c.speed for c in collections]
    return SpeedFit(sxy / sxx, sxy / math.sqrt(sxx * syy), len(xs), (min(speeds), max(speeds)))


def value_of(collection: Collection, what: str) -> float:
    if what == "wall":
        return collection.wall
    if what == "cpu":
        return collection.cpu_total
    return collection.cpu_without_receiver


def round_pairs(
    collections: list[Collection], numerator: str = "full", denominator: str = "contrib"
) -> list[tuple[Collection, Collection]]:
    """Each round's (numerator's, denominator's) collections, in round order; a round without both is left out."""
    by_round: dict[int, dict[str, Collection]] = {}
    for collection in collections:
        by_round.setdefault(collection.round, {})[collection.configuration] = collection
    return [
        (pair[numerator], pair[denominator]) for _, pair in sorted(by_round.items()) if numerator in pair and denominator in pair
    ]


def ratios(
    collections: list[Collection], numerator: str, denominator: str, what: str, fit: SpeedFit | None = None
) -> list[float]:
    """The rounds' ratios; with ``fit``, each divided by the two collections' probe ratio to the fit's power:
    what the ratio would have been had the machine run at one speed for both."""
    values = []
    for top, bottom in round_pairs(collections, numerator, denominator):
        ratio = value_of(top, what) / value_of(bottom, what)
        if fit is not None:
            ratio /= (top.speed / bottom.speed) ** fit.slope
        values.append(ratio)
    return values


def speed_lines(collections: list[Collection]) -> list[str]:
    """What the speed probe saw, how well it explains the collections' spread, and the adjusted ratios'."""
    fits = {what: speed_fit(collections, what) for what in ("wall", "cpu")}
    if any(fit is None for fit in fits.values()):
        return []
    wall, cpu = fits["wall"], fits["cpu"]
    assert wall is not None and cpu is not None

    def spread_of(values: list[float]) -> str:
        return f"{statistics.stdev(values):.3f}" if len(values) > 1 else "-"

    raw = {what: ratios(collections, "full", "contrib", what) for what in fits}
    adjusted = {what: ratios(collections, "full", "contrib", what, fits[what]) for what in fits}
    return [
        "**The machine's speed.** `benchmarks/speed_probe.py` runs beside the whole run, outside every configuration: "
        "every 50 ms the same small piece of pure-Python work, timed in its own CPU time. Its mean over a collection's "
        f"window ranged from {cpu.spread[0]:.0f} to {cpu.spread[1]:.0f} us per piece in this run: the machine's virtual "
        "CPUs run the same instructions at different speeds from one moment to the next (on a shared host, a core's "
        "other hyperthread given to a neighbour), and every process of a collection slows together. Each collection "
        "against its configuration's mean (logs, least squares over "
        f"{cpu.collections} collections): CPU follows the probe with slope {cpu.slope:.2f} (correlation "
        f"{cpu.correlation:.2f}), wall time with slope {wall.slope:.2f} (correlation {wall.correlation:.2f}). "
        "Dividing each round's full / contrib by its two collections' probe ratio to that power takes the "
        f"round-to-round standard deviation of the ratio from {spread_of(raw['wall'])} to "
        f"{spread_of(adjusted['wall'])} (wall) and from {spread_of(raw['cpu'])} to {spread_of(adjusted['cpu'])} (CPU)."
        + share_adjusted(collections, cpu),
    ]


def share_adjusted(collections: list[Collection], fit: SpeedFit) -> str:
    """The package's share (full - contrib, CPU ms per rollout) with each collection brought to the run's median speed."""
    middle = statistics.median(c.speed for c in collections)

    def at_middle(c: Collection) -> float:
        return c.cpu_total * (middle / c.speed) ** fit.slope * 1000 / c.rollouts

    shares = [at_middle(full) - at_middle(contrib) for full, contrib in round_pairs(collections)]
    if not shares:
        return ""
    contrib = statistics.median(at_middle(c) for c in collections if c.configuration == "contrib")
    low, high = median_interval(shares)
    return (
        f" At the run's median speed ({middle:.0f} us per piece) the package's share is "
        f"{statistics.median(shares):+.2f} ms of CPU per rollout (95% interval of the median {low:+.2f} to {high:+.2f}), "
        f"{statistics.median(shares) / contrib:.1%} of contrib's {contrib:.2f} ms."
    )


def versions() -> str:
    python = RELEASE.venv / "bin" / "python"
    names = ("nemo-gym", "gym-instrument", "opentelemetry-sdk", "opentelemetry-instrumentation-fastapi", "ray", "uvicorn")
    code = (
        "import sys, importlib.metadata as m\n"
        f"for n in {names!r}:\n"
        "    print(n, m.version(n))\n"
        "print('Python', sys.version.split()[0])\n"
    )
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False).stdout
    return ", ".join(line.strip() for line in out.splitlines() if line.strip())


def machine_lines(busy_at_start: float, forced: bool) -> list[str]:
    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
    commit = code_version(REPO)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        f"- Machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}; load average at start {load}; "
        f"other processes' CPU at start {busy_at_start:.2f} cores" + (" (**--force: the machine was busy**)" if forced else ""),
        f"- Versions (the e2e venv `{RELEASE.venv.name}`): {versions()}",
        f"- Code: git {commit}",
    ]


def report(
    workload: Workload,
    collections: list[Collection],
    spans: dict[str, Counter[str]],
    header: list[str],
    quick: bool,
    busy: bool,
    elapsed: float,
    profiles: list[Profile],
    price: dict[str, Any] | None = None,
) -> str:
    lines = [
        "## A whole real run: NeMo Gym 0.7.0 end to end",
        "",
        "`make bench-e2e` (`benchmarks/whole_run.py`; `make bench` keeps this section as it is): real `gym env start` and "
        f"`gym eval run --no-serve` collections of {workload.rollouts} mcqa rollouts ({workload.tasks} tasks x "
        f"{workload.repeats}), concurrency {workload.concurrency}, model-call capture and the health pass on, against a "
        f"scripted model on 127.0.0.1; each configuration with its own servers, receiver and model; {slotting(workload)}; "
        f"{workload.rounds} round(s) in {len(blocks_of(workload.rounds, workload.blocks))} block(s), every configuration "
        f"started afresh for each block{', with one untimed warm-up each' if workload.warmup else ', no warm-up'}. "
        "Ratios are taken within a round; min / median / max over rounds. CPU is every process of the "
        "configuration (collector, servers, Ray, model, receiver), from `/proc` and `wait4`, read "
        f"{SETTLE_SECONDS:g} s after the collector exits (the servers' batch span processors send their last spans).",
        "",
    ]
    if quick:
        lines += ["**Quick run (tiny sizes): these figures prove the harness runs; they judge nothing.**", ""]
    if busy:
        lines += ["**Measured on a busy machine** (other processes used CPU during the run; see the last column).", ""]
    lines += [*header, f"- Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s", ""]

    lines += [
        "| configuration | what runs | wall (median) | CPU, all processes (median) | ratio | wall: min / median / max | "
        "CPU: min / median / max | spans per rollout | others' CPU during its rounds (cores, median) |",
        "| --- | --- | ---: | ---: | --- | --- | --- | ---: | ---: |",
    ]
    what = {
        "none": "plain `gym`, no launcher",
        "contrib": "`opentelemetry-instrument`, `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=gym`",
        "full": "`opentelemetry-instrument` with this package's preset"
        + ("" if workload.variant is None else f", {VARIANTS[workload.variant].what}"),
    }
    previous = {"contrib": "none", "full": "contrib"}
    for name in CONFIGURATIONS:
        mine = [c for c in collections if c.configuration == name]
        if not mine:
            continue
        wall = statistics.median(c.wall for c in mine)
        cpu = statistics.median(c.cpu_total for c in mine)
        rollouts = sum(c.rollouts for c in mine)
        per_rollout = sum(spans.get(name, Counter()).values()) / max(rollouts, 1)
        others = statistics.median(c.others for c in mine)
        if name in previous and ratios(collections, name, previous[name], "wall"):  # (a run without `none`)
            walls = spread(ratios(collections, name, previous[name], "wall"))
            cpus = spread(ratios(collections, name, previous[name], "cpu"))
            ratio = f"{name} / {previous[name]}"
            wall_spread = " / ".join(f"{v:.3f}" for v in walls)
            cpu_spread = " / ".join(f"{v:.3f}" for v in cpus)
        else:
            ratio = wall_spread = cpu_spread = ""
        lines.append(
            f"| {name} | {what[name]} | {wall:.2f} s | {cpu:.2f} s | {ratio} | {wall_spread} | {cpu_spread} | "
            f"{per_rollout:.1f} | {others:.2f} |"
        )
    without = [
        f"{name} / {previous[name]} {' / '.join(f'{v:.3f}' for v in spread(ratios(collections, name, previous[name], 'gym')))}"
        for name in CONFIGURATIONS
        if name in previous and ratios(collections, name, previous[name], "gym")
    ]
    if without:
        lines += [
            "",
            "CPU of all processes but the receiver (it stands for your tracing backend, which runs elsewhere), "
            "min / median / max: " + "; ".join(without) + ".",
        ]
    goal = goal_line(collections)
    if goal:
        lines += ["", *goal]
    by_block = block_lines(collections)
    if by_block:
        lines += ["", *by_block]
    speed = speed_lines(collections)
    if speed:
        lines += ["", *speed]
    lines += ["", *cpu_table(collections), ""]
    pauses = gc_lines(collections)
    if pauses:
        lines += [*pauses, ""]
    lines += [*span_table(collections, spans), ""]
    lines += [*share_lines(collections, spans, price), ""]
    lines += outcome_lines(collections)
    if profiles:
        lines += ["", *profile_lines(profiles)]
    return "\n".join(lines).rstrip() + "\n"


def together_heading(text: str) -> str:
    """A --together run's report as the section beside the alone run's: its own heading and command."""
    text = text.replace("## A whole real run", "### Together: a whole real run", 1)
    return text.replace("`make bench-e2e` (", "`make bench-e2e BENCH_E2E_ARGS=--together` (", 1)


def variant_heading(text: str, workload: Workload) -> str:
    """A variant run's report as a section of its own: what full stands for in it, and its command."""
    variant = VARIANTS[workload.variant]  # type: ignore[index]
    arguments = f"--together --{variant.flag}" if workload.together else f"--{variant.flag}"
    text = text.replace("## A whole real run: NeMo Gym 0.7.0 end to end", f"### {variant.heading}", 1)
    return text.replace("`make bench-e2e` (", f"`make bench-e2e BENCH_E2E_ARGS='{arguments}'` (", 1)


def slotting(workload: Workload) -> str:
    """How a round's collections share the machine, for the report."""
    if workload.together:
        return (
            "in every round all configurations collect at the same moment (their collectors started a few "
            "milliseconds apart, in an order that takes every order in turn), sharing the machine's CPUs: every "
            "figure is higher than alone, and the machine's changing speed slows them all alike; their processes "
            f"are stopped (SIGSTOP) between rounds and resumed {THAW_SECONDS:g} s before them"
        )
    return (
        f"its processes stopped (SIGSTOP) while another collects and resumed {THAW_SECONDS:g} s before its own "
        "collections; the rounds take every order of the configurations in turn (each runs in every position, and "
        "directly after each other, equally often)"
    )


def block_lines(collections: list[Collection]) -> list[str]:
    """full / contrib per block of rounds: a difference between blocks is one of the servers' instances
    (where their memory and threads landed), which starting them afresh for each block averages out."""
    blocks = sorted({c.block for c in collections})
    if len(blocks) < 2:
        return []
    parts = []
    for block in blocks:
        mine = [c for c in collections if c.block == block]
        walls, cpus = ratios(mine, "full", "contrib", "wall"), ratios(mine, "full", "contrib", "cpu")
        if walls:
            rounds = sorted({c.round for c in mine})
            parts.append(
                f"block {block} (rounds {rounds[0]} to {rounds[-1]}): wall {statistics.median(walls):.3f}, "
                f"CPU {statistics.median(cpus):.3f}"
            )
    if not parts:
        return []
    lead = "**By block** (every configuration started afresh for each), full / contrib, median of its rounds: "
    return [lead + "; ".join(parts) + "."]


def cpu_table(collections: list[Collection]) -> list[str]:
    groups = sorted({group for c in collections for group in c.cpu})
    lines = [
        "CPU per process group, median over rounds (ms per rollout):",
        "",
        "| process group | " + " | ".join(CONFIGURATIONS) + " | full - contrib |",
        "| --- | " + " | ".join("---:" for _ in CONFIGURATIONS) + " | ---: |",
    ]
    for group in [*groups, "all"]:
        cells = {}
        for name in CONFIGURATIONS:
            mine = [c for c in collections if c.configuration == name]
            if mine:
                values = [(c.cpu_total if group == "all" else c.cpu.get(group, 0.0)) * 1000 / c.rollouts for c in mine]
                cells[name] = statistics.median(values)
        difference = f"{cells['full'] - cells['contrib']:+.2f}" if "full" in cells and "contrib" in cells else ""
        label = "**all**" if group == "all" else group
        lines.append(f"| {label} | " + " | ".join(f"{cells.get(n, 0.0):.2f}" for n in CONFIGURATIONS) + f" | {difference} |")
    return lines


def gc_total(collection: Collection, group: str | None = None) -> tuple[float, float]:
    """(full collections, CPU seconds of all pauses) in a collection: one group's, or every group's."""
    parts = collection.gc.values() if group is None else [collection.gc[group]] if group in collection.gc else []
    return sum(p["collections"][2] for p in parts), sum(sum(p["seconds"]) for p in parts)


def gc_lines(collections: list[Collection]) -> list[str]:
    """The garbage collector's pauses per group and configuration, and full's share outside them."""
    if not any(c.gc for c in collections):
        return []
    names = [n for n in CONFIGURATIONS if any(c.configuration == n for c in collections)]
    groups = sorted({group for c in collections for group in c.gc})
    lines = [
        "The garbage collector's pauses (`benchmarks/gc_hook.py`: `gc.callbacks` in every process of every configuration, "
        "the CPU time of the thread that collects), median over rounds: full (generation 2) collections per collection; "
        "CPU in pauses of every generation, ms per rollout. They are inside the CPU figures above:",
        "",
        "| process group | " + " | ".join(names) + " | full - contrib |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: |",
    ]
    for group in [*groups, None]:
        cells: dict[str, tuple[float, float]] = {}
        for name in names:
            mine = [c for c in collections if c.configuration == name]
            count = statistics.median(gc_total(c, group)[0] for c in mine)
            ms = statistics.median(gc_total(c, group)[1] * 1000 / c.rollouts for c in mine)
            cells[name] = (count, ms)
        difference = f"{cells['full'][1] - cells['contrib'][1]:+.2f}" if "full" in cells and "contrib" in cells else ""
        label = "**all**" if group is None else group
        lines.append(f"| {label} | " + " | ".join(f"{cells[n][0]:g}; {cells[n][1]:.2f}" for n in names) + f" | {difference} |")
    pairs = round_pairs(collections)
    if pairs:

        def per_rollout(c: Collection, seconds: float) -> float:
            return seconds * 1000 / c.rollouts

        in_pauses = [per_rollout(f, gc_total(f)[1]) - per_rollout(k, gc_total(k)[1]) for f, k in pairs]
        outside = [per_rollout(f, f.cpu_total - gc_total(f)[1]) - per_rollout(k, k.cpu_total - gc_total(k)[1]) for f, k in pairs]
        contrib_outside = statistics.median(per_rollout(k, k.cpu_total - gc_total(k)[1]) for _, k in pairs)
        low, high = median_interval(outside)
        full_more = sum(gc_total(f)[0] > gc_total(k)[0] for f, k in pairs)
        full_fewer = sum(gc_total(f)[0] < gc_total(k)[0] for f, k in pairs)
        lines += [
            "",
            f"Within a round, full - contrib per rollout: in the pauses {statistics.median(in_pauses):+.2f} ms (min / median / "
            "max " + " / ".join(f"{v:+.2f}" for v in spread(in_pauses)) + "), outside them "
            f"{statistics.median(outside):+.2f} ms (95% interval of the median {low:+.2f} to {high:+.2f}; "
            f"{statistics.median(outside) / contrib_outside:.1%} of contrib's {contrib_outside:.2f} ms outside its pauses). "
            f"full ran more full collections than contrib in {full_more} of {len(pairs)} rounds, fewer in {full_fewer}.",
        ]
    return lines


def span_table(collections: list[Collection], spans: dict[str, Counter[str]]) -> list[str]:
    rollouts = {name: sum(c.rollouts for c in collections if c.configuration == name) for name in CONFIGURATIONS}
    names = sorted({span for counts in spans.values() for span in counts})
    lines = [
        "Spans per rollout by name (all timed rounds):",
        "",
        "| span | " + " | ".join(n for n in CONFIGURATIONS if n != "none") + " |",
        "| --- | " + " | ".join("---:" for n in CONFIGURATIONS if n != "none") + " |",
    ]
    for span in names:
        cells = [f"{spans.get(n, Counter())[span] / max(rollouts[n], 1):.2f}" for n in CONFIGURATIONS if n != "none"]
        lines.append(f"| `{span}` | " + " | ".join(cells) + " |")
    return lines


def outcome_lines(collections: list[Collection]) -> list[str]:
    verdicts = {name: Counter() for name in CONFIGURATIONS}  # type: dict[str, Counter[str]]
    for c in collections:
        verdicts[c.configuration].update(c.verdicts)
    described = "; ".join(
        f"{name}: " + ", ".join(f"{count} {verdict}" for verdict, count in sorted(counts.items()))
        for name, counts in verdicts.items()
        if counts
    )
    return [
        "Every configuration wrote the same rows with the same rewards per task in every round (checked). "
        f"Health verdicts over the timed rounds: {described}."
    ]


def share_lines(collections: list[Collection], spans: dict[str, Counter[str]], price: dict[str, Any] | None) -> list[str]:
    """Where full's extra CPU goes, and how much of it OpenTelemetry's own price of the package's spans
    and baggage explains (``span_price.py``, when it ran)."""

    def median_ms(name: str, pick: Any) -> float:
        return statistics.median(pick(c) * 1000 / c.rollouts for c in collections if c.configuration == name)

    if not all(any(c.configuration == n for c in collections) for n in CONFIGURATIONS):
        return []
    contrib_total = median_ms("contrib", lambda c: c.cpu_total)
    servers = sum(
        median_ms("full", lambda c, g=group: c.cpu.get(g, 0.0)) - median_ms("contrib", lambda c, g=group: c.cpu.get(g, 0.0))
        for group in sorted({g for c in collections for g in c.cpu if g.startswith("server ")})
    )

    def part(group: str) -> float:
        return median_ms("full", lambda c: c.cpu.get(group, 0.0)) - median_ms("contrib", lambda c: c.cpu.get(group, 0.0))

    per_round = [
        (full.cpu_total / full.rollouts - contrib.cpu_total / contrib.rollouts) * 1000
        for full, contrib in round_pairs(collections)
    ]
    # Rounds are paired: the share is the median of the rounds' own full - contrib, with how precisely they pin it.
    total = statistics.median(per_round)
    low, high = median_interval(per_round)
    rollouts = {n: sum(c.rollouts for c in collections if c.configuration == n) for n in CONFIGURATIONS}
    per_rollout = {n: sum(spans.get(n, Counter()).values()) / max(rollouts[n], 1) for n in ("contrib", "full")}
    tracing = contrib_total - median_ms("none", lambda c: c.cpu_total)
    lines = [
        f"**The package's share**, full - contrib per rollout: {total:.2f} ms of CPU, the median of the rounds' own "
        f"(95% interval of the median {low:+.2f} to {high:+.2f}), {total / contrib_total:.1%} of contrib's "
        f"{contrib_total:.2f} ms. By process group (each group's own medians, which need not add up to the whole): the "
        f"Gym servers {servers:+.2f}, the collector {part('collector'):+.2f}, the receiver {part('receiver'):+.2f}, Ray "
        f"{part('Ray'):+.2f}. Within a round it was "
        + " / ".join(f"{v:+.2f}" for v in spread(per_round))
        + f" ms (min / median / max). contrib's tracing costs {tracing:.2f} ms per rollout over none, for "
        f"{per_rollout['contrib']:.1f} spans and the instrumentations that make them."
    ]
    if price is not None:
        spans_ms, baggage = price["spans"]["ms_per_rollout"], price["baggage"]
        floor = spans_ms["total"] + baggage["ms_per_rollout"]
        rounds = " / ".join(f"{v:.2f}" for v in spread(price["spans"]["rounds_total_ms"]))
        lines += [
            "",
            "**What OpenTelemetry itself charges for what SPEC requires**, measured alone on this run's spans "
            "(`benchmarks/span_price.py`: full's first timed round made again with the SDK, no instrumentation running, "
            "through a `BatchSpanProcessor` and the OTLP/HTTP exporter to a fresh `oteltap`, paced over the collection's "
            "wall time; with the package's spans and without them, side by side):",
            "",
            f"- the package's {price['package_spans_per_rollout']:.1f} spans per rollout, made, exported and received among "
            f"the other {price['other_spans_per_rollout']:.1f}: {spans_ms['total']:.2f} ms per rollout (the process that "
            f"makes them {spans_ms['sender']:.2f}, the receiver {spans_ms['receiver']:.2f}; rounds {rounds} min / median / "
            f"max; each of the package's spans made {price['spans']['times']} times over, the difference divided back);",
            f"- the `nemo.gym.rollout.id` baggage entry on {baggage['hops_per_rollout']:.1f} requests per rollout (the CLIENT "
            f"spans): {baggage['ms_per_rollout']:.3f} ms per rollout; the configured propagator "
            f"(`{baggage['propagators']}`) injects and extracts a request's headers in {baggage['us_per_hop_with']:.1f} us "
            f"with the entry, {baggage['us_per_hop_without']:.1f} us without.",
            "",
            f"Together {floor:.2f} ms, {floor / contrib_total:.1%} of contrib: the least the required spans and baggage "
            "cost. "
            + (
                f"That price lies inside the share's interval ({low:+.2f} to {high:+.2f} ms): this run cannot tell the "
                f"package's own work ({total - floor:+.2f} ms per rollout beyond the price) from its round-to-round noise."
                if low <= floor <= high
                else f"The rest of the share, {total - floor:+.2f} ms per rollout, is the package's own work in the run and "
                "what its spans and baggage cost there beyond their price alone (caches and the garbage collector are "
                "shared with everything else)."
            ),
        ]
    return lines


def _in_place(figures: dict[str, float], category: str) -> float:
    """One place's figure of a profile, or (``all``) every place's together."""
    return sum(figures.values()) if category == "all" else figures.get(category, 0.0)


def _category_rows(by_name: dict[str, Profile], names: list[str]) -> list[str]:
    """The table of own time per rollout by where the code lives, one column per configuration."""
    lines = [
        "| where | " + " | ".join(names) + " | full - contrib |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: |",
    ]
    for category in [*(c for c, _ in CATEGORIES), OTHER, "all"]:
        cells = {n: _in_place(by_name[n].by_category, category) for n in names}
        difference = f"{cells['full'] - cells['contrib']:+.3f}" if "full" in cells and "contrib" in cells else ""
        label = "**all**" if category == "all" else category
        lines.append(f"| {label} | " + " | ".join(f"{cells[n]:.3f}" for n in names) + f" | {difference} |")
    return lines


def _package_lines(full: Profile | None, where: str) -> list[str]:
    """The package's own functions in ``full``'s profile, and its calls into OpenTelemetry."""
    lines: list[str] = []
    if full is not None and full.package_functions:
        lines += [
            "",
            f"The package's own functions in {where}, `full` (ms per rollout; inclusive time of a wrapper includes the "
            "wrapped call's):",
            "",
            "| function | own | inclusive | calls per rollout |",
            "| --- | ---: | ---: | ---: |",
        ]
        lines += [
            f"| `{name}` | {own:.3f} | {inclusive:.3f} | {calls:.1f} |"
            for name, (own, inclusive, calls) in full.package_functions.items()
        ]
    if full is not None and full.package_entries:
        lines += ["", "Calls from the package into OpenTelemetry, `full` (inclusive ms per rollout, largest first):", ""]
        lines += [f"- `{edge}`: {ms:.3f}" for edge, ms in full.package_entries.items()]
    return lines


def _split_extra(full: dict[str, float], contrib: dict[str, float]) -> tuple[float, float, float, float, float]:
    """full - contrib of a profile's figures by place, in the parts both breakdowns name: the package's own code
    and wrapt, propagation, OpenTelemetry's work on the extra spans, the metrics SDK, and the rest (the host's code)."""

    def extra(*prefixes: str) -> float:
        return sum(full.get(c, 0.0) - contrib.get(c, 0.0) for c, _ in CATEGORIES if c.startswith(prefixes))

    spans = extra("SDK span", "export", "attribute", "context", "OpenTelemetry API", "FastAPI", "aiohttp")
    return (
        extra("gym_instrument", "wrapt"),
        extra("propagation"),
        spans,
        extra("SDK metrics"),
        full.get(OTHER, 0.0) - contrib.get(OTHER, 0.0),
    )


def collector_lines(profiles: list[Profile]) -> list[str]:
    """The collector's profile (``gym eval run``, profiled from its start, imports included, to its exit)."""
    by_name = {p.configuration: p for p in profiles}
    names = [n for n in CONFIGURATIONS if n in by_name]
    if not names:
        return []
    lines = [
        "",
        "#### The collector",
        "",
        "The same, in `gym eval run` itself, profiled from its start-up (the launcher's and the package's imports, "
        "which a collection's CPU includes) to its exit; ms per rollout:",
        "",
        *_category_rows(by_name, names),
        *_calls_rows(by_name, names, "the collector"),
    ]
    full, contrib = by_name.get("full"), by_name.get("contrib")
    if full is not None and contrib is not None and full.calls_by_category and contrib.calls_by_category:
        of = sum(contrib.calls_by_category.values())
        total = sum(full.calls_by_category.values()) - of
        parts = _split_extra(full.calls_by_category, contrib.calls_by_category)
        own, propagation, spans, metrics, rest = (f"{part:+.1f} ({part / of:+.2%})" for part in parts)
        lines += [
            "",
            f"**Breakdown of the collector's share, by calls** (full - contrib = {total:+.1f} Python calls per rollout, "
            f"{total / of:+.2%} of contrib's): OpenTelemetry's work on the extra spans (the dispatch and health spans "
            f"made, their attributes cleaned, processed, exported) {spans}; the package's own code and wrapt {own}; "
            f"baggage propagation {propagation}; the package's counters {metrics}; code outside the package and "
            f"OpenTelemetry (NeMo Gym, aiohttp, the standard library) {rest}.",
        ]
    return lines + _package_lines(full, "the collector")


def profile_lines(profiles: list[Profile]) -> list[str]:
    """The servers' breakdown, then the collector's (each a list of one Profile per configuration)."""
    servers = [p for p in profiles if p.part == "servers"]
    return _servers_lines(servers) + collector_lines([p for p in profiles if p.part == "collector"])


def _calls_rows(by_name: dict[str, Profile], names: list[str], where: str) -> list[str]:
    """Python calls per rollout by place, and full's extra calls as a share of all of contrib's."""
    if not (all(by_name[n].calls_by_category for n in names) and "full" in by_name and "contrib" in by_name):
        return []
    categories = [c for c, _ in CATEGORIES] + [OTHER]
    contrib_calls = sum(by_name["contrib"].calls_by_category.values())
    lines = [
        "",
        f"Python function calls per rollout, {where}, by the same places: yappi counts every call exactly, so "
        "unlike its times these do not move with the machine's speed or with where a pause lands. The last column is "
        "full's extra calls as a share of all of contrib's:",
        "",
        "| where | " + " | ".join(names) + " | full - contrib | of contrib's calls |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: | ---: |",
    ]
    for category in [*categories, "all"]:
        counts = {n: _in_place(by_name[n].calls_by_category, category) for n in names}
        extra = counts["full"] - counts["contrib"]
        label = "**all**" if category == "all" else category
        lines.append(
            f"| {label} | " + " | ".join(f"{counts[n]:.1f}" for n in names) + f" | {extra:+.1f} | {extra / contrib_calls:+.2%} |"
        )
    return lines


def _servers_lines(profiles: list[Profile]) -> list[str]:
    by_name = {p.configuration: p for p in profiles}
    names = [n for n in CONFIGURATIONS if n in by_name]
    lines = [
        "### Where the servers' and the collector's CPU goes (yappi, one collection per configuration)",
        "",
        "`python3 benchmarks/whole_run.py --profile`: yappi on CPU time, every thread, in each Gym server process "
        "(started from a `.pth` start-up hook in the venv, `benchmarks/profile_hook.py`), from just before the "
        "collection to just after it; each function's own time, by where its code lives, in ms per rollout. yappi "
        "makes every Python call slower, so the absolute figures are higher than unprofiled ones; the shares and the "
        "differences between configurations are what to read.",
        "",
        *_category_rows(by_name, names),
    ]
    lines += _calls_rows(by_name, names, "all servers")
    lines += [
        "",
        "The garbage collector's pauses, all servers (collections; CPU ms per rollout), measured with `gc.callbacks`. "
        "yappi books each pause on whatever function was running, so they are inside the rows above, mostly in the "
        "last one:",
        "",
        "| generation | " + " | ".join(names) + " | full - contrib |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: |",
    ]
    for generation in range(3):
        cells_ms = {n: by_name[n].gc_ms[generation] for n in names}
        difference = f"{cells_ms['full'] - cells_ms['contrib']:+.3f}" if "full" in cells_ms and "contrib" in cells_ms else ""
        lines.append(
            f"| {generation} | "
            + " | ".join(f"{by_name[n].gc_collections[generation]}; {cells_ms[n]:.3f}" for n in names)
            + f" | {difference} |"
        )
    full_total = sum(by_name["full"].by_category.values()) if "full" in by_name else 0.0
    contrib_total = sum(by_name["contrib"].by_category.values()) if "contrib" in by_name else 0.0
    if "full" in by_name and "contrib" in by_name and full_total != contrib_total:
        full, contrib = by_name["full"].by_category, by_name["contrib"].by_category
        total = full_total - contrib_total
        own, propagation, spans, metrics, rest = _split_extra(full, contrib)

        def share(part: float) -> str:  # a part's share of the whole: only when the whole is a cost
            return f"{part / total:.0%}: " if total > 0 else ""

        lines += [
            "",
            f"**Breakdown of the servers' share** (yappi ms per rollout, full - contrib = {total:+.3f}): the package's own "
            f"code {own:+.3f} ({share(own)}per request the `isolate` wrapper around uvicorn's `run_asgi` and the "
            "`ServerClient.post` condition check, per rollout the verify wrapper; table below); baggage propagation "
            f"{propagation:+.3f} ({share(propagation)}OpenTelemetry's W3C baggage propagator parsing the "
            "`nemo.gym.rollout.id` entry on every incoming request and encoding it on every outgoing one, which contrib's "
            f"requests do not carry); the verify span made, cleaned, processed and exported {spans:+.3f}"
            f"{f' ({spans / total:.0%})' if total > 0 else ''}; the reward counter {metrics:+.3f}; the rest, in the "
            "servers' own code (GC pauses and "
            f"scheduling land there, and vary by a few tenths between runs), {rest:+.3f}.",
        ]
    servers = sorted({s for p in profiles for s in p.by_server})
    lines += [
        "",
        "| server | " + " | ".join(names) + " | full - contrib |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---: |",
    ]
    for server in servers:
        cells = {n: by_name[n].by_server.get(server, 0.0) for n in names}
        difference = f"{cells['full'] - cells['contrib']:+.3f}" if "full" in cells and "contrib" in cells else ""
        lines.append(f"| {server} | " + " | ".join(f"{cells[n]:.3f}" for n in names) + f" | {difference} |")
    return lines + _package_lines(by_name.get("full"), "the servers")


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def compile_package(venv_python: Path) -> None:
    """The package's bytecode, as a wheel install has it (pip compiles at install time).

    The e2e venv installs the package editable, from this checkout. Without ``__pycache__`` there
    (a fresh clone, or ``PYTHONDONTWRITEBYTECODE`` set, as on the machine this is measured on),
    every process a collection starts under the launcher (the collector, Ray's workers for its
    job) compiles the package's sources again (``import gym_instrument`` took 35 ms instead of 10 ms
    in the e2e venv, timed by hand with ``-X importtime``), while every other package of the run
    loads the bytecode pip wrote: the cost of an unusual install, not of the package."""
    subprocess.run([str(venv_python), "-m", "compileall", "-q", str(REPO / "gym_instrument")], check=True)


def span_price(venv_python: Path, config: Configuration, first: Collection, quick: bool) -> dict[str, Any]:
    """``span_price.py`` in the e2e venv on the spans of ``config``'s first timed round (``first``),
    with the configuration's environment (its batch span processor's settings, its propagators)."""
    offsets = config.span_offsets
    command = [
        str(venv_python),
        str(HERE / "span_price.py"),
        f"--spans={config.spans_path}",
        f"--start={offsets[0]}",
        f"--end={offsets[1] if len(offsets) > 1 else -1}",
        f"--rollouts={first.rollouts}",
        f"--seconds={first.wall:.3f}",
        f"--rounds={1 if quick else 5}",
    ]
    log("the price of the package's spans and baggage, measured alone (span_price.py)")
    done = subprocess.run(command, env=config.env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise E2EFailure(f"span_price.py failed ({done.returncode}): {done.stderr[-2000:]}")
    price: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return price


def run(options: argparse.Namespace) -> int:
    global WORK
    WORK = WORK_ROOT / ("profile" if options.profile else "timed")
    workload = QUICK if options.quick else FULL
    workload = Workload(
        tasks=options.tasks or workload.tasks,
        repeats=options.repeats or workload.repeats,
        concurrency=options.concurrency or workload.concurrency,
        rounds=options.rounds or workload.rounds,
        warmup=workload.warmup if options.warmup is None else options.warmup,
        blocks=options.blocks or workload.blocks,
        together=options.together,
        variant=options.variant,
    )
    if options.profile:
        workload = replace(workload, rounds=1, blocks=1, together=False)  # the variant stays
        # (one configuration at a time: yappi's figures are compared between them)
    busy_at_start = others_cores()
    log(f"other processes use {busy_at_start:.2f} cores now (load average {os.getloadavg()[0]:.2f})")
    deadline = time.monotonic() + options.wait
    while busy_at_start > options.max_busy and not options.force and time.monotonic() < deadline:
        time.sleep(10)
        busy_at_start = others_cores()
        log(f"waiting for a quiet machine (--wait): other processes use {busy_at_start:.2f} cores")
    busy = busy_at_start > options.max_busy
    if busy and not options.force:
        log(
            f"REFUSED: the machine is busy ({busy_at_start:.2f} cores used by other processes, more than "
            f"--max-busy {options.max_busy}); the figures would measure the neighbours. Run later, or with --force."
        )
        return 2
    if busy:
        log(f"the machine is BUSY ({busy_at_start:.2f} cores); --force: running anyway, the results will say so")

    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    venv_python = e2e_run.ensure_venv(RELEASE, with_package=True)
    compile_package(venv_python)
    tmpdir = WORK / "tmp"
    tmpdir.mkdir()
    scratch = e2e_run.Scratch(tmpdir, Path(tempfile.mkdtemp(prefix="gibench-")))  # Ray wants a short path
    tasks_path = write_tasks(WORK / "tasks.jsonl", workload.tasks)
    profile_dir = WORK / "profiles" if options.profile else None
    site = e2e_run.site_packages(venv_python)  # (a subprocess: found once)
    variant = VARIANTS[workload.variant] if workload.variant is not None else None
    if profile_dir is not None:
        install_hook(site, PROFILE_HOOK, "profile_hook.py")
    install_hook(site, GC_HOOK, "gc_hook.py")
    if variant is not None and variant.sampler:
        install_sampler(site)
    header = machine_lines(busy_at_start, busy)
    collections: list[Collection] = []
    profiles: list[Profile] = []
    probe_processes = Processes({k: v for k, v in os.environ.items() if k != RUN_MARKER_VAR})
    probe = start_speed_probe(probe_processes)
    names = [n for n in CONFIGURATIONS if n in options.configurations]
    orders = round_orders(names, workload.rounds)
    spans: dict[str, Counter[str]] = {}
    priced: tuple[Configuration, Collection] | None = None  # full's first timed round, for span_price
    try:
        for block, numbers in enumerate(blocks_of(workload.rounds, workload.blocks), 1):
            log(f"block {block}: rounds {numbers[0]} to {numbers[-1]}, every configuration started afresh")
            configs: dict[str, Configuration] = {}
            try:
                for name in names:
                    work = WORK / name if workload.blocks == 1 else WORK / f"block-{block}" / name
                    start_configuration(name, work, venv_python, scratch, tasks_path, profile_dir, configs, workload.variant)
                shared = Shared(tasks_path, workload, frozenset(config.marker for config in configs.values()))
                time.sleep(SETTLE_SECONDS)  # the servers' start-up spans are sent before their processes stop
                for config in configs.values():
                    freeze(config.marker)  # each runs only for its own collections (THAW_SECONDS)

                if workload.warmup:
                    for slot in slots(configs, names, workload.together):
                        collect_running(slot, "warm-up", 0, shared)
                for number in numbers:
                    order = orders[number - 1]
                    log(f"round {number}: {(' + ' if workload.together else ', ').join(order)}")
                    for slot in slots(configs, order, workload.together):
                        for config in slot:
                            config.span_offsets.append(config.spans_path.stat().st_size)
                        label = f"round-{number}"
                        for collection in collect_running(slot, label, number, shared, profile_dir, profiles):
                            collection.block = block
                            collections.append(collection)
                            if collection.configuration == "full" and priced is None:
                                priced = (configs["full"], collection)
                    problems = compare_outcomes({c.configuration: c.outcomes for c in collections if c.round == number})
                    if problems:
                        raise E2EFailure(f"round {number}: the configurations' outcomes differ: " + "; ".join(problems[:10]))
                for config in configs.values():
                    thaw(config.marker)
                for name, config in configs.items():
                    wait_quiet(config.spans_path, 3.0)
                    if config.span_offsets:
                        spans.setdefault(name, Counter()).update(spans_by_name(config.spans_path, config.span_offsets[0], None))
            finally:
                for config in reversed(list(configs.values())):
                    thaw(config.marker)  # a stopped process would not see the Ctrl-C that stops it
                    survivors = config.processes.stop_all(config.marker)
                    if survivors:
                        log(f"{config.name}: processes still alive after stopping: {survivors}")
    finally:
        probe_processes.interrupt(probe, 5)
        if profile_dir is not None:
            remove_hook(site, PROFILE_HOOK)
        remove_hook(site, GC_HOOK)
        remove_sampler(site)
        scratch.remove()

    price = None
    if not options.profile and priced is not None and not (variant is not None and variant.sampler):
        price = span_price(venv_python, *priced, options.quick)
    busy_during = any(c.others > options.max_busy for c in collections)
    text = report(
        workload, collections, spans, header, options.quick, busy or busy_during, time.monotonic() - started_at, profiles, price
    )
    if options.profile:
        body = "\n".join(profile_lines(profiles))
        (WORK / "PROFILE.md").write_text(body + "\n")
        log(f"profile written to {WORK / 'PROFILE.md'}")
    print()
    print(text)
    if options.output is not None:
        # A profiled run's timings are yappi's: only its breakdown goes into RESULTS.md, in a section of its own.
        if options.profile:
            WHOLE_RUN_PROFILE.write(options.output, "\n".join([*profile_lines(profiles), "", *header]))
        elif variant is not None:  # a variant of full: the default runs' sections stay as they are
            variant.section.write(options.output, variant_heading(text, workload), before=WHOLE_RUN_PROFILE)
        elif workload.together:  # its own section: the alone run's stays beside it
            WHOLE_RUN_TOGETHER.write(options.output, together_heading(text), before=WHOLE_RUN_PROFILE)
        else:
            WHOLE_RUN.write(options.output, text, before=WHOLE_RUN_PROFILE)
        log(f"written to {options.output}")
    (WORK / "RESULTS.md").write_text(text)
    raw = [{**vars(c), "cpu": dict(c.cpu), "verdicts": dict(c.verdicts), "outcomes": None} for c in collections]
    (WORK / "collections.json").write_text(json.dumps(raw, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 tasks x 2, concurrency 4, 1 round, no warm-up; judges nothing")
    parser.add_argument("--tasks", type=int, help=f"distinct mcqa tasks (default {FULL.tasks})")
    parser.add_argument("--repeats", type=int, help=f"rollouts per task (default {FULL.repeats})")
    parser.add_argument("--concurrency", type=int, help=f"rollouts in flight (default {FULL.concurrency})")
    parser.add_argument("--rounds", type=int, help=f"timed rounds (default {FULL.rounds})")
    parser.add_argument(
        "--blocks", type=int, help=f"blocks of rounds, each with every configuration started afresh (default {FULL.blocks})"
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="every configuration of a round collects at the same moment: the machine's changing speed hits all alike",
    )
    variants = parser.add_mutually_exclusive_group()
    for variant in VARIANTS.values():
        variants.add_argument(
            f"--{variant.flag}",
            dest="variant",
            action="store_const",
            const=variant.flag,
            help=f"full with {variant.what}; a section of its own in RESULTS.md",
        )
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None, help="one untimed collection each first")
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS), help="comma-separated subset of none,contrib,full")
    parser.add_argument("--profile", action="store_true", help="yappi in every Gym server for one round; adds the breakdown")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for a quiet machine before refusing (default 0)")
    parser.add_argument("--force", action="store_true", help="run even when the machine is busy (the results say so)")
    parser.add_argument(
        "--max-busy", type=float, default=0.25, help="other processes' CPU, in cores, above which the machine is busy"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=HERE / "RESULTS.md",
        help="the Markdown file whose whole_run section is written (default benchmarks/RESULTS.md)",
    )
    parser.add_argument(
        "--no-output", dest="output", action="store_const", const=None, help="write only .e2e-work/bench-e2e/RESULTS.md"
    )
    options = parser.parse_args(argv)
    options.configurations = [name.strip() for name in options.configurations.split(",") if name.strip()]
    unknown = set(options.configurations) - set(CONFIGURATIONS)
    if unknown:
        parser.error(f"unknown configuration(s) {sorted(unknown)}")
    return run_main(lambda: run(options), lambda: WORK)


if __name__ == "__main__":
    sys.exit(main())
