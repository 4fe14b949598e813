#!/usr/bin/env python3
"""End-to-end test of gym_instrument against the released NeMo Gym, over real HTTP and OTLP.

From nothing, this script:
  1. finds Python 3.12 and builds `.venv-e2e/` with nemo-gym 0.4.0, this repository's package,
     the OpenTelemetry launcher/distro/OTLP-HTTP exporter, the aiohttp-client and FastAPI
     instrumentations, and the `oteltap` OTLP receiver (skipped when the stamp matches);
  2. starts `oteltap` (OTLP/HTTP protobuf) and the scripted model server (e2e/model_server.py),
     both on 127.0.0.1;
  3. starts NeMo Gym's servers (mcqa and example_single_tool_call, from the wheel) with
     `opentelemetry-instrument -- gym env start …`, waits for `All N / N servers ready`;
  4. collects rollouts for e2e/data/tasks.jsonl with `opentelemetry-instrument -- gym eval run --no-serve …`;
  5. checks what the receiver got against rollouts.jsonl (see checks.py), prints a short
     excerpt of real spans, and stops everything it started.

Usage:
    python3 e2e/run.py                  # the full test (needs the package's pyproject.toml)
    python3 e2e/run.py --without-package  # the pipeline with HTTP instrumentation only
    python3 e2e/run.py --write-excerpt    # also refresh e2e/SPANS_EXCERPT.md

Runs on any Python 3.9+ with the standard library; logs of the last run stay in `.e2e-work/`.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parent
REPO = E2E_DIR.parent
sys.path.insert(0, str(E2E_DIR))

import checks  # noqa: E402
from otlp_json import read_received  # noqa: E402

VENV = REPO / ".venv-e2e"
WORK = REPO / ".e2e-work"
STAMP = VENV / ".e2e-stamp"
REQUIREMENTS = E2E_DIR / "requirements.txt"
TASKS = E2E_DIR / "data" / "tasks.jsonl"
EXCERPT = E2E_DIR / "SPANS_EXCERPT.md"

NUM_REPEATS = 2
# The config files shipped inside the nemo-gym wheel, relative to its site-packages root.
GYM_CONFIGS = (
    "resources_servers/mcqa/configs/mcqa.yaml",
    "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
    "responses_api_models/openai_model/configs/openai_model.yaml",
)
# Server directories whose per-server venv NeMo Gym looks for under `uv_venv_dir`.
SERVER_DIRS = (
    "resources_servers/mcqa",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "responses_api_models/openai_model",
)
EXPECTED_SERVERS = 5  # 2 resources servers, 2 agents, 1 model server

# Every process this run starts carries this variable, so cleanup can find stragglers exactly.
RUN_MARKER_VAR = "GYM_INSTRUMENT_E2E_RUN"

TIMEOUT_SERVERS_READY = 300
TIMEOUT_COLLECTION = 300
TIMEOUT_SPANS = 60
TIMEOUT_STOP = 20


class E2EFailure(Exception):
    """A step failed; the message says which and where its log is."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind so that every started process is stopped."""


def _stop_on_signal(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def log(message: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"(no {path})"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(f"    {line}" for line in text[-lines:])


# ---------------------------------------------------------------------------------------------
# Python 3.12 and the venv
# ---------------------------------------------------------------------------------------------


def _works_as_312(python: str) -> bool:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "3.12"


def find_python312() -> str:
    candidates: list[str] = []
    if os.environ.get("E2E_PYTHON"):
        candidates.append(os.environ["E2E_PYTHON"])
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        found = glob.glob(os.path.join(root, "versions", "3.12.*", "bin", "python3.12"))
        # Newest patch release first.
        found.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parents[1].name.split(".")], reverse=True)
        candidates.extend(found)
    on_path = shutil.which("python3.12")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _works_as_312(candidate):
            return candidate
    raise E2EFailure(
        "Python 3.12 is needed for the NeMo Gym venv and was not found. Looked for "
        '"$(pyenv root)"/versions/3.12.*/bin/python3.12 and a working `python3.12` on PATH '
        f"(tried: {candidates or 'nothing found'}). Install it (e.g. `pyenv install 3.12`) "
        "or point E2E_PYTHON at a Python 3.12 interpreter."
    )


def _stamp(python: str, with_package: bool) -> str:
    digest = hashlib.sha256()
    digest.update(REQUIREMENTS.read_bytes())
    digest.update(subprocess.run([python, "-VV"], capture_output=True, text=True).stdout.encode())
    digest.update(str(REPO).encode())
    if with_package:
        digest.update((REPO / "pyproject.toml").read_bytes())
    digest.update(b"with-package" if with_package else b"without-package")
    return digest.hexdigest()


def ensure_venv(with_package: bool) -> Path:
    """Build .venv-e2e, or reuse it when its stamp matches the requirements."""
    if with_package and not (REPO / "pyproject.toml").exists():
        raise E2EFailure(
            f"{REPO / 'pyproject.toml'} does not exist, so the package cannot be installed. "
            "Run with --without-package to exercise the pipeline with HTTP instrumentation only."
        )
    python = find_python312()
    stamp = _stamp(python, with_package)
    venv_python = VENV / "bin" / "python"
    if venv_python.exists() and STAMP.exists() and STAMP.read_text().strip() == stamp:
        log(f"reusing {VENV.name} (stamp matches)")
        return venv_python
    log(f"building {VENV.name} with {python}")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(VENV)], check=True)
    install_log = WORK / "pip-install.log"
    command = [str(venv_python), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(REQUIREMENTS)]
    if with_package:
        command += ["-e", str(REPO)]
    started = time.monotonic()
    with install_log.open("w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    if result.returncode != 0:
        raise E2EFailure(f"pip install failed (exit {result.returncode}); log: {install_log}\n{tail(install_log)}")
    STAMP.write_text(stamp + "\n")
    log(f"installed in {time.monotonic() - started:.0f}s")
    return venv_python


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _default_sigint() -> None:
    # A child of a non-interactive shell may inherit SIGINT as ignored; NeMo Gym's shutdown
    # and uvicorn's graceful stop both rely on it, so restore the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Processes:
    """The processes this run started, each as the leader of its own session."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, command: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log(f"starting {name}: {' '.join(command)}")
        out = log_path.open("ab")
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env or self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        out.close()
        self.started.append((name, process))
        return process

    def interrupt(self, process: subprocess.Popen, timeout: float) -> None:
        """Ctrl-C to the whole process group, as a terminal would; kill what is left after `timeout`."""
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill_session(process.pid)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    @staticmethod
    def _session_members(session_id: int) -> list[int]:
        members = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # Fields after the parenthesised command: state ppid pgrp session ...
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 3 and int(fields[3]) == session_id and fields[0] != "Z":
                members.append(int(entry.name))
        return members

    def kill_session(self, session_id: int) -> None:
        # Ray's workers start their own process groups inside the session; the session catches them.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            members = self._session_members(session_id)
            if not members:
                return
            for pid in members:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self._session_members(session_id):
                time.sleep(0.2)

    def kill_marked(self, marker: str) -> list[int]:
        """Kill any process whose environment carries this run's marker (a process that left its session)."""
        needle = f"{RUN_MARKER_VAR}={marker}".encode()
        killed = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed.append(int(entry.name))
                except ProcessLookupError:
                    pass
        return killed

    def stop_all(self, marker: str) -> None:
        for _, process in reversed(self.started):
            if process.poll() is None:
                self.interrupt(process, timeout=5)
            else:
                self.kill_session(process.pid)
        stragglers = self.kill_marked(marker)
        if stragglers:
            log(f"killed {len(stragglers)} leftover process(es) of this run: {stragglers}")


def wait_for(
    description: str,
    condition: Callable[[], bool],
    timeout: float,
    alive: Callable[[], str | None] | None = None,
    interval: float = 0.5,
) -> None:
    """Poll `condition` until true; fail after `timeout` or as soon as `alive()` reports a death."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if alive is not None:
            death = alive()
            if death:
                raise E2EFailure(f"while waiting for {description}: {death}")
        if time.monotonic() > deadline:
            raise E2EFailure(f"timed out after {timeout:.0f}s waiting for {description}")
        time.sleep(interval)


def exited(process: subprocess.Popen, name: str, log_path: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        if process.poll() is None:
            return None
        return f"{name} exited with code {process.returncode}; log: {log_path}\n{tail(log_path)}"

    return check


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def site_packages(venv_python: Path) -> Path:
    out = subprocess.run(
        [str(venv_python), "-c", "import nemo_gym, pathlib; print(pathlib.Path(nemo_gym.__file__).parents[1])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def base_env(marker: str, receiver_port: int, ray_tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        {
            RUN_MARKER_VAR: marker,
            "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            # Everything stays on this machine.
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            # Ray: bind to 127.0.0.1, keep its files in our temp dir, report nothing home.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(ray_tmp),
            # OpenTelemetry: export over OTLP/HTTP to the receiver, quickly.
            "OTEL_SERVICE_NAME": "nemo-gym-e2e",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_METRIC_EXPORT_INTERVAL": "1000",
            # Delta counters can be summed across processes without knowing which sent what.
            "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
        }
    )
    return env


def run(args: argparse.Namespace) -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    venv_python = ensure_venv(with_package=not args.without_package)
    gym_site = site_packages(venv_python)
    bin_dir = VENV / "bin"

    marker = uuid.uuid4().hex
    ray_tmp = Path(tempfile.mkdtemp(prefix="gie2e-ray-"))
    receiver_port = free_port()
    head_port = free_port()
    env = base_env(marker, receiver_port, ray_tmp)
    processes = Processes(env)

    spans_path = WORK / "received.ndjson"
    model_requests_path = WORK / "model_requests.jsonl"
    rollouts_path = WORK / "rollouts" / "rollouts.jsonl"
    rollouts_path.parent.mkdir()
    env_log = WORK / "gym_env_start.log"
    collect_log = WORK / "gym_eval_run.log"

    # NeMo Gym would build one uv venv per server; point each at .venv-e2e instead.
    venvs_root = WORK / "server-venvs"
    for server_dir in SERVER_DIRS:
        (venvs_root / server_dir).mkdir(parents=True)
        (venvs_root / server_dir / ".venv").symlink_to(VENV, target_is_directory=True)

    try:
        # 1. The OTLP receiver: its own env, not instrumented.
        receiver_env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        receiver = processes.start(
            "oteltap", [str(bin_dir / "oteltap"), "--port", str(receiver_port)], spans_path, WORK, receiver_env
        )
        wait_for(
            f"the OTLP receiver on 127.0.0.1:{receiver_port}",
            lambda: port_open(receiver_port),
            30,
            exited(receiver, "oteltap", spans_path),
        )

        # 2. The scripted model server (not instrumented: it stands for an external model API).
        model_port_file = WORK / "model_server.port"
        model_log = WORK / "model_server.log"
        model = processes.start(
            "model server",
            [
                str(venv_python),
                str(E2E_DIR / "model_server.py"),
                "--answers",
                str(TASKS),
                "--port-file",
                str(model_port_file),
                "--request-log",
                str(model_requests_path),
            ],
            model_log,
            WORK,
            receiver_env,
        )
        wait_for("the model server's port", model_port_file.exists, 30, exited(model, "model server", model_log))
        model_port = int(model_port_file.read_text())

        # 3. NeMo Gym's servers, under the zero-code launcher (the servers inherit it).
        configs = [arg for path in GYM_CONFIGS for arg in ("--config", str(gym_site / path))]
        head = ["+head_server.host=127.0.0.1", f"+head_server.port={head_port}"]
        env_start = processes.start(
            "gym env start",
            [
                str(bin_dir / "opentelemetry-instrument"),
                "--",
                str(bin_dir / "gym"),
                "env",
                "start",
                *configs,
                f"+policy_base_url=http://127.0.0.1:{model_port}/v1",
                "+policy_api_key=e2e-dummy-key",
                "+policy_model_name=scripted-model",
                "+skip_venv_if_present=true",
                f"+uv_venv_dir={venvs_root}",
                *head,
            ],
            env_log,
            WORK,
        )
        ready = re.compile(r"All (\d+) / (\d+) servers ready")

        def servers_ready() -> bool:
            match = ready.search(env_log.read_text(errors="replace")) if env_log.exists() else None
            if match and match.group(1) != match.group(2):
                raise E2EFailure(f"NeMo Gym reported {match.group(0)}; log: {env_log}")
            return bool(match)

        wait_for(
            "`All N / N servers ready` from gym env start",
            servers_ready,
            TIMEOUT_SERVERS_READY,
            exited(env_start, "gym env start", env_log),
            interval=1,
        )
        count = int(ready.search(env_log.read_text(errors="replace")).group(1))
        if count != EXPECTED_SERVERS:
            raise E2EFailure(f"expected {EXPECTED_SERVERS} servers, gym env start started {count}; log: {env_log}")
        log(f"{count} servers ready after {time.monotonic() - started_at:.0f}s")

        # 4. Rollout collection, under the launcher.
        collect = processes.start(
            "gym eval run --no-serve",
            [
                str(bin_dir / "opentelemetry-instrument"),
                "--",
                str(bin_dir / "gym"),
                "eval",
                "run",
                "--no-serve",
                f"+input_jsonl_fpath={TASKS}",
                f"+output_jsonl_fpath={rollouts_path}",
                f"+num_repeats={args.repeats}",
                f"+num_samples_in_parallel={args.concurrency}",
                *head,
            ],
            collect_log,
            WORK,
        )
        try:
            collect.wait(timeout=TIMEOUT_COLLECTION)
        except subprocess.TimeoutExpired:
            raise E2EFailure(
                f"rollout collection did not finish in {TIMEOUT_COLLECTION}s; log: {collect_log}\n{tail(collect_log)}"
            ) from None
        if collect.returncode != 0:
            raise E2EFailure(f"rollout collection failed (exit {collect.returncode}); log: {collect_log}\n{tail(collect_log)}")

        results = read_jsonl(rollouts_path)
        materialized = read_jsonl(rollouts_path.with_name("rollouts_materialized_inputs.jsonl"))
        failures_file = read_jsonl(rollouts_path.with_name("rollouts_failures.jsonl"))
        if failures_file:
            raise E2EFailure(
                f"NeMo Gym recorded {len(failures_file)} failed rollouts: {rollouts_path.with_name('rollouts_failures.jsonl')}"
            )
        if len(results) != len(materialized) or not results:
            raise E2EFailure(
                f"rollouts.jsonl has {len(results)} rows for {len(materialized)} dispatched rows; log: {collect_log}"
            )
        log(f"collected {len(results)} rollouts after {time.monotonic() - started_at:.0f}s")

        report = checks.Report()
        rollouts = checks.join_rollouts(materialized, results, report)
        rewards = {r.reward for r in rollouts}
        report.check(
            {0.0, 1.0} <= rewards, f"the scripted model should give both rewards 0.0 and 1.0; got {sorted(rewards, key=str)}"
        )

        # 5. Wait (bounded) until the spans have crossed the wire, then stop the servers.
        def spans_arrived() -> bool:
            received = read_received(spans_path)
            if args.without_package:
                names = [s.name for s in received.spans if s.kind == "SERVER"]
                return names.count("POST /verify") >= len(rollouts) and names.count("POST /run") >= len(rollouts)
            names = [s.name for s in received.spans]
            counter = checks.rewarded_counter_total(received, checks.Report())
            rewarded = sum(1 for s in received.spans if s.name == checks.VERIFY_SPAN and checks.REWARD in s.attributes)
            return (
                names.count(checks.DISPATCH_SPAN) >= len(rollouts)
                and names.count(checks.VERIFY_SPAN) >= len(rollouts)
                and counter is not None
                and counter >= rewarded
            )

        try:
            wait_for("the spans of every rollout at the receiver", spans_arrived, TIMEOUT_SPANS, interval=1)
        except E2EFailure as error:
            report.notes.append(str(error))  # the checks below say precisely what is missing
        time.sleep(2)  # anything late (a duplicate) would arrive now
        processes.interrupt(env_start, timeout=TIMEOUT_STOP)
        time.sleep(1)

        received = read_received(spans_path)
        checks.check_http_propagation(rollouts, received, report)
        checks.check_no_leaked_request_context(received, report)
        if not args.without_package:
            checks.check_gym_spans(rollouts, received, report)
            checks.check_rewarded_counter(received, report)
            checks.check_model_baggage(rollouts, read_jsonl(model_requests_path), report)

        for note in report.notes:
            log(note)
        excerpt = [] if args.without_package else checks.excerpt_lines(rollouts, received)
        if excerpt:
            write_excerpt(excerpt, WORK / "SPANS_EXCERPT.md")
            if args.write_excerpt and not report.failures:
                write_excerpt(excerpt, EXCERPT)
                log(f"wrote {EXCERPT.relative_to(REPO)}")
            print("\nExcerpt of the received spans (one rollout, from dispatch to verify, trimmed):")
            for line in excerpt:
                print(f"  {line}")
            print()
        elapsed = time.monotonic() - started_at
        if report.failures:
            log(f"FAILED after {elapsed:.0f}s: {len(report.failures)} problem(s); logs in {WORK}")
            for failure in report.failures:
                print(f"  - {failure}")
            return 1
        mode = "pipeline and HTTP propagation only (--without-package)" if args.without_package else "all assertions"
        log(f"PASSED ({mode}) in {elapsed:.0f}s: {len(rollouts)} rollouts; logs in {WORK}")
        return 0
    finally:
        processes.stop_all(marker)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def write_excerpt(lines: list[str], path: Path) -> None:
    body = "\n".join(lines)
    path.write_text(
        "# Spans from the end-to-end run\n\n"
        "Written by `python3 e2e/run.py --write-excerpt` (the `make e2e` run): one rollout's trace as the OTLP\n"
        "receiver got it from NeMo Gym 0.4.0: the path from the collector's dispatch to the resources\n"
        "server's verify, across three processes, trimmed to names, ids and the `nemo.gym.*` attributes.\n"
        "The HTTP spans come from the aiohttp-client and FastAPI instrumentations.\n\n"
        f"```json\n{body}\n```\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--without-package",
        action="store_true",
        help="do not install gym_instrument; check the pipeline and HTTP propagation only",
    )
    parser.add_argument("--repeats", type=int, default=NUM_REPEATS, help=f"rollouts per task (default {NUM_REPEATS})")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts in flight at once (default 4)")
    parser.add_argument("--write-excerpt", action="store_true", help=f"refresh {EXCERPT.relative_to(REPO)} after a passing run")
    args = parser.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    try:
        return run(args)
    except E2EFailure as error:
        log(f"FAILED: {error}")
        log(f"logs are in {WORK}")
        return 1
    except (KeyboardInterrupt, Stopped) as stop:
        log(f"interrupted ({stop or 'SIGINT'}); everything this run started has been stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
