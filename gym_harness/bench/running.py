"""A whole run: every configuration started, its collections timed round by round, the report written."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gym_harness.bench import hand
from gym_harness.bench.hand.likeness import (
    RolloutSpans,
    differences,
    metric_objects,
    metric_shapes,
    rollout_spans,
    same_lines,
)
from gym_harness.bench.launch import measure, start_costs
from gym_harness.bench.proc import (
    CLOCK_TICKS,
    cpu_between,
    freeze,
    gc_between,
    gc_pauses,
    machine_busy_ticks,
    others_cores,
    probe_mean,
    snapshot,
    thaw,
    wait_reaped,
)
from gym_harness.bench.profile import Profile, read_profiles
from gym_harness.bench.render import machine_lines, report
from gym_harness.bench.render_profile import profile_lines
from gym_harness.bench.render_sizes import sizes_report
from gym_harness.bench.stats import Collection
from gym_harness.bench.workload import (
    CONFIGURATIONS,
    DEFAULT_CONFIGURATIONS,
    EXPECTED_SERVERS,
    FULL,
    GYM_CONFIGS,
    LAUNCHED_ONLY,
    QUICK,
    RAY_WITHOUT_LAUNCHER,
    RELEASE,
    SAMPLER_DIST,
    SAMPLER_MODULE,
    SERVER_DIRS,
    SETTLE_SECONDS,
    THAW_SECONDS,
    VARIANTS,
    Workload,
    blocks_of,
    compare_outcomes,
    configuration_env,
    rollout_outcomes,
    round_orders,
    write_tasks,
)
from gym_harness.environment import Scratch, base_env
from gym_harness.jsonl import read_jsonl
from gym_harness.otlp_json import span_objects, wait_quiet
from gym_harness.paths import BENCHMARKS, MODEL_SERVER, REPO
from gym_harness.paths import WORK as E2E_WORK
from gym_harness.processes import RUN_MARKER_VAR, E2EFailure, Processes, exited, free_port, log, port_open, tail, wait_for
from gym_harness.venvs import ensure_venv, site_packages

WORK_ROOT = E2E_WORK / "bench-e2e"
WORK = WORK_ROOT / "timed"  # run() points it at WORK_ROOT / "profile" for --profile
TIMEOUT_SERVERS_READY = 300
TIMEOUT_COLLECTION = 900
SPEED_SAMPLES = "speed.txt"  # benchmarks/speed_probe.py's samples, in WORK
PROFILE_HOOK = "_gym_bench_profile_hook"
GC_HOOK = "_gym_bench_gc_hook"  # benchmarks/gc_hook.py in the venv: every process counts its GC pauses
GC_DIR_VAR = "GYM_BENCH_GC_DIR"


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


def ray_start_as(name: str, launcher: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """How a configuration's ``ray start`` runs: the launcher and the environment of its other processes, or
    (RAY_WITHOUT_LAUNCHER) none and that environment without OpenTelemetry's variables. The run's marker and
    the GC hook's folder stay, so that Ray's CPU and pauses are counted in every configuration alike."""
    if name not in RAY_WITHOUT_LAUNCHER:
        return launcher, env
    return [], {k: v for k, v in env.items() if not k.startswith(LAUNCHED_ONLY)}


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
    env = configuration_env(name, base_env(RELEASE.venv, marker, receiver_port, scratch), variant)
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
    plain_env = {k: v for k, v in env.items() if not k.startswith(LAUNCHED_ONLY)}

    receiver = config.processes.start(
        f"{name}: oteltap", [str(bin_dir / "oteltap"), "--port", str(receiver_port)], config.spans_path, work, plain_env
    )
    wait_for("the OTLP receiver", lambda: port_open(receiver_port), 30, exited(receiver, "oteltap", config.spans_path))
    model_port_file = work / "model_server.port"
    model_log = work / "model_server.log"
    model = config.processes.start(
        f"{name}: model server",
        [str(venv_python), str(MODEL_SERVER), "--answers", str(tasks_path), "--port-file", str(model_port_file)],
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
    # configuration's launcher, as `gym env start` would start it; lean's (RAY_WITHOUT_LAUNCHER) without it,
    # in a plain environment, as its user would start it in a shell of its own.
    ray_port = free_port()
    ray_log = work / "ray_start.log"
    ray_launcher, ray_env = ray_start_as(name, launcher, env)
    ray_start = config.processes.start(
        f"{name}: ray start",
        [
            *ray_launcher,
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
        {**ray_env, "RAY_AUTH_MODE": "disabled"},  # `ray start` turns token auth on; a `ray.init()` cluster has none
    )
    [(code, _, _)] = wait_reaped([ray_start], TIMEOUT_SERVERS_READY)
    if code != 0:
        raise E2EFailure(f"{name}: ray start failed (exit {code}); log: {ray_log}\n{tail(ray_log)}")
    config.ray_address = f"127.0.0.1:{ray_port}"

    gym_site = site_packages(venv_python)
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


# How often a configuration is started when one of its servers found its port taken.
START_ATTEMPTS = 3
PORT_TAKEN = "address already in use"


def start_retrying(
    name: str,
    work: Path,
    venv_python: Path,
    scratch: Any,
    tasks_path: Path,
    profile_dir: Path | None,
    started: dict[str, Configuration],
    variant: str | None = None,
) -> Configuration:
    """:func:`start_configuration`, started again (its processes stopped, a work folder of its own) when
    a server of it found its port taken: NeMo Gym picks a free port, then binds it later, and meanwhile
    another configuration's Ray worker can bind it (they take ports in the same range). Any other
    failure is the run's."""
    for attempt in range(1, START_ATTEMPTS + 1):
        folder = work if attempt == 1 else work.with_name(f"{work.name}-start-{attempt}")
        try:
            return start_configuration(name, folder, venv_python, scratch, tasks_path, profile_dir, started, variant)
        except E2EFailure as failure:
            env_log = folder / "gym_env_start.log"
            said = str(failure) + (env_log.read_text(errors="replace") if env_log.exists() else "")
            config = started.get(name)
            if attempt == START_ATTEMPTS or PORT_TAKEN not in said or config is None:
                raise
            del started[name]
            config.processes.stop_all(config.marker)
            log(f"{name}: a server's port was taken before it bound it ({PORT_TAKEN}); starting {name} again")
    raise AssertionError("unreachable")  # (the last attempt returns or raises)


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
            raise E2EFailure(f"{config.name}: the collection failed (exit {code}); log: {log_path}\n{tail(log_path)}")
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
        rows = read_jsonl(rollouts_path)
        failures = read_jsonl(rollouts_path.with_name("rollouts_failures.jsonl"))
        if failures or len(rows) != workload.rollouts:
            raise E2EFailure(
                f"{config.name}: {len(rows)} rows and {len(failures)} failures for {workload.rollouts} rollouts; "
                f"log: {out / 'gym_eval_run.log'}"
            )
        verdicts = Counter(str(row.get("verdict")) for row in read_jsonl(rollouts_path.with_name("rollout_verdicts.jsonl")))
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


def start_speed_probe(processes: Processes) -> subprocess.Popen[bytes]:
    """``speed_probe.py`` for the whole run, on this interpreter, outside every configuration (no marker)."""
    path = WORK / SPEED_SAMPLES
    path.touch()
    command = [sys.executable, str(BENCHMARKS / "speed_probe.py"), str(path)]
    return processes.start("speed probe", command, WORK / "speed_probe.log", WORK)


def _remove_module(site: Path, module: str) -> None:
    """``<module>.py`` out of ``site``, with the bytecode an interpreter may have cached of it."""
    (site / f"{module}.py").unlink(missing_ok=True)
    for cached in (site / "__pycache__").glob(f"{module}.*.pyc"):
        cached.unlink(missing_ok=True)


def install_hook(site: Path, module: str, source: str) -> None:
    """``benchmarks/<source>`` as ``<module>`` in the NeMo Gym venv's ``site``, imported by every interpreter's
    start-up (a ``.pth``)."""
    shutil.copy(BENCHMARKS / source, site / f"{module}.py")
    (site / f"{module}.pth").write_text(f"import {module}\n")


def remove_hook(site: Path, module: str) -> None:
    (site / f"{module}.pth").unlink(missing_ok=True)
    _remove_module(site, module)


def install_sampler(site: Path) -> None:
    """``drop_ours_sampler.py`` in ``site`` with the ``opentelemetry_traces_sampler`` entry point the SDK
    looks up for ``OTEL_TRACES_SAMPLER=gym_bench_drop_ours``."""
    shutil.copy(BENCHMARKS / "drop_ours_sampler.py", site / f"{SAMPLER_MODULE}.py")
    dist = site / SAMPLER_DIST
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {SAMPLER_MODULE}\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[opentelemetry_traces_sampler]\n{SAMPLER_MODULE} = {SAMPLER_MODULE}:sampler\n")


def remove_sampler(site: Path) -> None:
    """The sampler's files out of ``site`` again, the bytecode an interpreter cached of it included."""
    shutil.rmtree(site / SAMPLER_DIST, ignore_errors=True)
    _remove_module(site, SAMPLER_MODULE)


def compile_package(venv_python: Path) -> None:
    """The package's bytecode, as a wheel install has it (pip compiles at install time).

    The e2e venv installs the package editable, from this checkout. Without ``__pycache__`` there
    (a fresh clone, or ``PYTHONDONTWRITEBYTECODE`` set, as on the machine this is measured on),
    every process a collection starts under the launcher (the collector, Ray's workers for its
    job) compiles the package's sources again (``import gym_instrument`` took 35 ms instead of 10 ms
    in the e2e venv, timed by hand with ``-X importtime``), while every other package of the run
    loads the bytecode pip wrote: the cost of an unusual install, not of the package."""
    subprocess.run([str(venv_python), "-m", "compileall", "-q", str(REPO / "gym_instrument")], check=True)


def size_order(sizes: Sequence[int], number: int) -> tuple[int, ...]:
    """The run sizes of round ``number``, alternating which goes first: a configuration's collections of one round
    follow each other, so the machine's speed is nearly the same for both."""
    return tuple(sizes) if number % 2 else tuple(reversed(sizes))


def read_likeness(configs: dict[str, Configuration], likeness: dict[str, RolloutSpans]) -> None:
    """The spans ``hand`` and ``gym`` exported per rollout in this block's timed rounds, added to ``likeness``;
    an E2EFailure when they differ (the ratio between them would not be like with like)."""
    if not ("hand" in configs and "gym" in configs):
        return
    block: dict[str, RolloutSpans] = {}
    for name in ("hand", "gym"):
        config = configs[name]
        block[name] = rollout_spans(span_objects(config.spans_path, config.span_offsets[0], None))
        block[name].metrics = metric_shapes(metric_objects(config.spans_path))  # (from the start: see likeness)
        likeness.setdefault(name, RolloutSpans()).update(block[name])
    problems = differences("hand", block["hand"], "gym", block["gym"])
    if problems:
        raise E2EFailure("hand and gym did not export the same spans per rollout: " + "; ".join(problems[:10]))
    log(f"hand and gym exported the same spans for each of {len(block['gym'].shapes)} rollouts")


def span_price(venv_python: Path, config: Configuration, first: Collection, quick: bool) -> dict[str, Any]:
    """``span_price.py`` in the e2e venv on the spans of ``config``'s first timed round (``first``),
    with the configuration's environment (its batch span processor's settings, its propagators)."""
    offsets = config.span_offsets
    command = [
        str(venv_python),
        "-m",
        "gym_harness.bench.span_price",  # from the checkout's root (cwd below): the harness by name
        f"--spans={config.spans_path}",
        f"--start={offsets[0]}",
        f"--end={offsets[1] if len(offsets) > 1 else -1}",
        f"--rollouts={first.rollouts}",
        f"--seconds={first.wall:.3f}",
        f"--rounds={1 if quick else 5}",
    ]
    log("the price of the package's spans and baggage, measured alone (span_price.py)")
    done = subprocess.run(command, env=config.env, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise E2EFailure(f"span_price.py failed ({done.returncode}): {done.stderr[-2000:]}")
    price: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return price


@dataclass(frozen=True)
class Finished:
    """What a run leaves its entry point, which writes it into RESULTS.md: the report and its parts."""

    workload: Workload
    text: str  # the report (render.report)
    header: list[str]  # the machine, the versions, the code (render.machine_lines)
    profiles: list[Profile]  # --profile's, one per configuration and part
    configurations: tuple[str, ...] = DEFAULT_CONFIGURATIONS  # the configurations that ran


def run(options: argparse.Namespace, commit: str) -> Finished | None:
    """The run ``options`` (``benchmarks/whole_run.py``'s command line) ask for, measuring the code at
    ``commit``; None when the machine is busy and the run refused (``--force`` runs anyway)."""
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
    sizes = tuple(sorted(set(getattr(options, "sizes", None) or ())))
    if sizes and not options.profile:
        workload = replace(workload, tasks=sizes[-1] // workload.repeats, sizes=sizes)
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
        return None
    if busy:
        log(f"the machine is BUSY ({busy_at_start:.2f} cores); --force: running anyway, the results will say so")

    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    venv_python = ensure_venv(RELEASE, with_package=True)
    compile_package(venv_python)
    tmpdir = WORK / "tmp"
    tmpdir.mkdir()
    scratch = Scratch(tmpdir, Path(tempfile.mkdtemp(prefix="gibench-")))  # Ray wants a short path
    tasks_path = write_tasks(WORK / "tasks.jsonl", workload.tasks)  # the model's answers: every size's tasks
    # Each run size's tasks (the first of the largest's) and workload; one size unless --sizes.
    sized = {
        size: (
            write_tasks(WORK / f"tasks-{size}.jsonl", size // workload.repeats),
            replace(workload, tasks=size // workload.repeats),
        )
        for size in workload.sizes
    } or {workload.rollouts: (tasks_path, workload)}
    profile_dir = WORK / "profiles" if options.profile else None
    site = site_packages(venv_python)  # (a subprocess: found once)
    variant = VARIANTS[workload.variant] if workload.variant is not None else None
    if profile_dir is not None:
        install_hook(site, PROFILE_HOOK, "profile_hook.py")
    install_hook(site, GC_HOOK, "gc_hook.py")
    if variant is not None and variant.sampler:
        install_sampler(site)
    names = [n for n in CONFIGURATIONS if n in options.configurations]
    if "hand" in names:
        hand.install(venv_python, site)
    header = machine_lines(busy_at_start, busy, commit)
    collections: list[Collection] = []
    profiles: list[Profile] = []
    probe_processes = Processes({k: v for k, v in os.environ.items() if k != RUN_MARKER_VAR})
    probe = start_speed_probe(probe_processes)
    orders = round_orders(names, workload.rounds)
    spans: dict[str, Counter[str]] = {}
    priced: tuple[Configuration, Collection] | None = None  # full's first timed round, for span_price
    likeness: dict[str, RolloutSpans] = {}  # hand's and gym's spans per rollout, over every block
    try:
        for block, numbers in enumerate(blocks_of(workload.rounds, workload.blocks), 1):
            log(f"block {block}: rounds {numbers[0]} to {numbers[-1]}, every configuration started afresh")
            configs: dict[str, Configuration] = {}
            try:
                for name in names:
                    work = WORK / name if workload.blocks == 1 else WORK / f"block-{block}" / name
                    start_retrying(name, work, venv_python, scratch, tasks_path, profile_dir, configs, workload.variant)
                markers = frozenset(config.marker for config in configs.values())
                shared = {size: Shared(path, sized_workload, markers) for size, (path, sized_workload) in sized.items()}
                largest = max(shared)
                time.sleep(SETTLE_SECONDS)  # the servers' start-up spans are sent before their processes stop
                for config in configs.values():
                    freeze(config.marker)  # each runs only for its own collections (THAW_SECONDS)

                if workload.warmup:
                    for slot in slots(configs, names, workload.together):
                        collect_running(slot, "warm-up", 0, shared[largest])
                for number in numbers:
                    order = orders[number - 1]
                    log(f"round {number}: {(' + ' if workload.together else ', ').join(order)}")
                    for slot in slots(configs, order, workload.together):
                        for config in slot:
                            config.span_offsets.append(config.spans_path.stat().st_size)
                        for size in size_order(list(shared), number):
                            label = f"round-{number}" if len(shared) == 1 else f"round-{number}-{size}"
                            for collection in collect_running(slot, label, number, shared[size], profile_dir, profiles):
                                collection.block = block
                                collections.append(collection)
                                if collection.configuration == "full" and priced is None:
                                    priced = (configs["full"], collection)
                    for size in shared:
                        problems = compare_outcomes(
                            {c.configuration: c.outcomes for c in collections if c.round == number and c.rollouts == size}
                        )
                        if problems:
                            raise E2EFailure(f"round {number}: the configurations' outcomes differ: " + "; ".join(problems[:10]))
                for config in configs.values():
                    thaw(config.marker)
                for name, config in configs.items():
                    wait_quiet(config.spans_path, 3.0)
                    if config.span_offsets:
                        spans.setdefault(name, Counter()).update(spans_by_name(config.spans_path, config.span_offsets[0], None))
                if numbers and not options.profile:
                    read_likeness(configs, likeness)
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
        hand.remove(site)
        scratch.remove()

    price = None
    if not options.profile and priced is not None and not (variant is not None and variant.sampler):
        price = span_price(venv_python, *priced, options.quick)
    busy_during = any(c.others > options.max_busy for c in collections)
    same = same_lines("hand", likeness["hand"], "gym", likeness["gym"]) if likeness else []
    if workload.sizes:
        log("the launcher's and this package's start costs (gym_harness/bench/launch.py)")
        costs = start_costs(measure(3 if options.quick else 30))
        text = sizes_report(
            workload, collections, header, options.quick, busy or busy_during, time.monotonic() - started_at, costs, same
        )
    else:
        text = report(
            workload,
            collections,
            spans,
            header,
            options.quick,
            busy or busy_during,
            time.monotonic() - started_at,
            profiles,
            price,
            same,
        )
    if options.profile:
        body = "\n".join(profile_lines(profiles))
        (WORK / "PROFILE.md").write_text(body + "\n")
        log(f"profile written to {WORK / 'PROFILE.md'}")
    print()
    print(text)
    (WORK / "RESULTS.md").write_text(text)
    raw = [{**vars(c), "cpu": dict(c.cpu), "verdicts": dict(c.verdicts), "outcomes": None} for c in collections]
    (WORK / "collections.json").write_text(json.dumps(raw, indent=1))
    return Finished(workload, text, header, profiles, tuple(names))
