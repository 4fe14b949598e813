#!/usr/bin/env python3
"""End-to-end test of gym_instrument against the released NeMo Gym, over real HTTP and OTLP.

For each release in releases.py (0.4.0 on Python 3.12, 0.7.0 on Python 3.13), from nothing:
  1. finds the release's Python and builds its venv with the nemo-gym wheel from PyPI, this
     repository's package (editable), the OpenTelemetry launcher/distro/OTLP-HTTP exporter, the
     aiohttp-client and FastAPI instrumentations, and the `oteltap` OTLP receiver (skipped when
     the venv's stamp matches);
  2. per pass (0.7.0: once with model-call capture on, once with it off):
     a. starts `oteltap` (OTLP/HTTP protobuf) and the scripted model server (model_server.py),
        both on 127.0.0.1;
     b. starts NeMo Gym's servers from the wheel's configs (and e2e/configs/) with
        `opentelemetry-instrument -- gym env start …`, waits for `All N / N servers ready`;
     c. collects rollouts with `opentelemetry-instrument -- gym eval run --no-serve …`;
     d. checks what the receiver got against rollouts.jsonl and, where the release has a health
        pass, rollout_verdicts.jsonl (checks.py), and stops everything it started;
  3. runs the release's in-process check (0.7.0: inprocess_070.py) with the venv's Python.

Usage:
    python3 e2e/run.py                    # every release, every pass
    python3 e2e/run.py --release 0.7.0    # one release
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
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parent
REPO = E2E_DIR.parent
sys.path.insert(0, str(E2E_DIR))

import checks  # noqa: E402
from otlp_json import read_received  # noqa: E402
from processes import RUN_MARKER_VAR, E2EFailure, Processes, exited, free_port, log, port_open, run_main, tail, wait_for  # noqa: E402
from releases import RELEASES, Pass, Release  # noqa: E402

WORK = REPO / ".e2e-work"
EXCERPT = E2E_DIR / "SPANS_EXCERPT.md"

NUM_REPEATS = 2
# Ray puts AF_UNIX sockets about 70 characters below RAY_TMPDIR, and a socket path over 107
# bytes breaks its dashboard (start-up goes from about 17 s to 75 s).
RAY_TMPDIR_MAX_LENGTH = 32
# Temporary folders Gym and Ray leave in TMPDIR, and Ray's default RAY_TMPDIR: none may appear in
# /tmp (the run's own short RAY_TMPDIR fallback there is removed in a `finally`).
LEFTOVER_TMP_PATTERNS = ("tmp*wandb-*", "pymp-*", "ray")

TIMEOUT_SERVERS_READY = 300
TIMEOUT_COLLECTION = 300
TIMEOUT_SPANS = 60
TIMEOUT_STOP = 20


# ---------------------------------------------------------------------------------------------
# Interpreters and venvs
# ---------------------------------------------------------------------------------------------


def _version_of(python: str) -> str | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_python(version: str) -> str:
    """`$E2E_PYTHON_<major><minor>`, else pyenv's newest `version.*`, else `python<version>` on PATH."""
    variable = f"E2E_PYTHON_{version.replace('.', '')}"
    candidates: list[str] = []
    if os.environ.get(variable):
        candidates.append(os.environ[variable])
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        found = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
        # Newest patch release first.
        found.sort(key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parents[1].name.split(".")], reverse=True)
        candidates.extend(found)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _version_of(candidate) == version:
            return candidate
    raise E2EFailure(
        f"Python {version} is needed for a NeMo Gym venv and was not found. Looked for "
        f'"$(pyenv root)"/versions/{version}.*/bin/python{version} and a working `python{version}` on PATH '
        f"(tried: {candidates or 'nothing found'}). Install it (e.g. `pyenv install {version}`) "
        f"or point {variable} at a Python {version} interpreter."
    )


def _stamp(release: Release, python: str, with_package: bool) -> str:
    digest = hashlib.sha256()
    digest.update(release.requirements.read_bytes())
    digest.update(" ".join(release.pip_options).encode())
    digest.update(subprocess.run([python, "-VV"], capture_output=True, text=True).stdout.encode())
    digest.update(str(REPO).encode())
    if with_package:
        digest.update((REPO / "pyproject.toml").read_bytes())
    digest.update(b"with-package" if with_package else b"without-package")
    return digest.hexdigest()


def ensure_venv(release: Release, with_package: bool) -> Path:
    """Build the release's venv, or reuse it when its stamp matches the requirements."""
    if with_package and not (REPO / "pyproject.toml").exists():
        raise E2EFailure(
            f"{REPO / 'pyproject.toml'} does not exist, so the package cannot be installed. "
            "Run with --without-package to exercise the pipeline with HTTP instrumentation only."
        )
    python = find_python(release.python)
    stamp_file = release.venv / ".e2e-stamp"
    stamp = _stamp(release, python, with_package)
    venv_python = release.venv / "bin" / "python"
    if venv_python.exists() and stamp_file.exists() and stamp_file.read_text().strip() == stamp:
        log(f"reusing {release.venv.name} (stamp matches)")
        return venv_python
    log(f"building {release.venv.name} for nemo-gym {release.version} with {python}")
    shutil.rmtree(release.venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(release.venv)], check=True)
    install_log = WORK / f"pip-install-{release.version}.log"
    command = [str(venv_python), "-m", "pip", "install", "--disable-pip-version-check", *release.pip_options]
    command += ["-r", str(release.requirements)]
    if with_package:
        command += ["-e", str(REPO)]
    started = time.monotonic()
    with install_log.open("w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
        if result.returncode == 0:
            # A conflict pip let through would break the run in a less readable place.
            result = subprocess.run([str(venv_python), "-m", "pip", "check"], stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise E2EFailure(f"pip install failed (exit {result.returncode}); log: {install_log}\n{tail(install_log)}")
    stamp_file.write_text(stamp + "\n")
    log(f"installed in {time.monotonic() - started:.0f}s")
    return venv_python


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


# ---------------------------------------------------------------------------------------------
# Environment and temporary folders
# ---------------------------------------------------------------------------------------------


@dataclass
class Scratch:
    """The run's temporary folders: TMPDIR inside the work folder, and a short RAY_TMPDIR."""

    tmpdir: Path
    ray_tmp: Path

    @classmethod
    def create(cls) -> Scratch:
        tmpdir = WORK / "tmp"
        tmpdir.mkdir(parents=True)
        ray_tmp = WORK / "ray"
        if len(str(ray_tmp)) > RAY_TMPDIR_MAX_LENGTH:
            ray_tmp = Path(tempfile.mkdtemp(prefix="gie2e-"))  # a checkout deep below /: keep it short
        ray_tmp.mkdir(exist_ok=True)
        return cls(tmpdir, ray_tmp)

    def remove(self) -> None:
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def tmp_entries() -> set[str]:
    root = Path(tempfile.gettempdir())
    return {path.name for pattern in LEFTOVER_TMP_PATTERNS for path in root.glob(pattern)}


def base_env(venv: Path, marker: str, receiver_port: int, scratch: Scratch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        {
            RUN_MARKER_VAR: marker,
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            # Everything stays on this machine, and every temporary file in the work folder.
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "TMPDIR": str(scratch.tmpdir),
            # Ray: bind to 127.0.0.1, keep its files in a short folder of ours, report nothing home.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(scratch.ray_tmp),
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
            # Ray's processes run under the launcher too: its dashboard polls `/api/healthz` through
            # the instrumented aiohttp client many times a second (about 300 spans a second with nine
            # servers), and Ray records its own metrics through the launcher's meter provider.
            "OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS": "/api/healthz",
        }
    )
    return env


# ---------------------------------------------------------------------------------------------
# One pass: servers, collection, checks
# ---------------------------------------------------------------------------------------------


@dataclass
class PassResult:
    label: str
    rollouts: int = 0
    report: checks.Report = field(default_factory=checks.Report)


def write_inputs(release: Release, path: Path) -> Path:
    path.write_text("".join(source.read_text() for source in release.inputs))
    return path


def run_pass(
    release: Release, gym_pass: Pass, venv_python: Path, marker: str, scratch: Scratch, args: argparse.Namespace
) -> PassResult:
    result = PassResult(f"nemo-gym {release.version} / {gym_pass.name}")
    report = result.report
    work = WORK / release.version / gym_pass.name
    work.mkdir(parents=True)
    gym_site = site_packages(venv_python)
    bin_dir = release.venv / "bin"
    receiver_port = free_port()
    head_port = free_port()
    env = base_env(release.venv, marker, receiver_port, scratch)
    processes = Processes(env)

    spans_path = work / "received.ndjson"
    model_requests_path = work / "model_requests.jsonl"
    rollouts_path = work / "rollouts" / "rollouts.jsonl"
    rollouts_path.parent.mkdir()
    env_log = work / "gym_env_start.log"
    collect_log = work / "gym_eval_run.log"
    inputs = write_inputs(release, work / "inputs.jsonl")
    capture = []
    if gym_pass.capture:
        (work / "model-calls").mkdir()
        capture = ["+observability_enabled=true", f"+model_call_capture_dir={work / 'model-calls'}"]

    # NeMo Gym would build one uv venv per server; point each at the release's venv instead.
    venvs_root = work / "server-venvs"
    for server_dir in release.server_dirs:
        (venvs_root / server_dir).mkdir(parents=True)
        (venvs_root / server_dir / ".venv").symlink_to(release.venv, target_is_directory=True)

    started_at = time.monotonic()
    try:
        # 1. The OTLP receiver: its own env, not instrumented.
        receiver_env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        receiver = processes.start(
            "oteltap", [str(bin_dir / "oteltap"), "--port", str(receiver_port)], spans_path, work, receiver_env
        )
        wait_for(
            f"the OTLP receiver on 127.0.0.1:{receiver_port}",
            lambda: port_open(receiver_port),
            30,
            exited(receiver, "oteltap", spans_path),
        )

        # 2. The scripted model server (not instrumented: it stands for an external model API).
        model_port_file = work / "model_server.port"
        model_log = work / "model_server.log"
        answers = [arg for source in release.inputs for arg in ("--answers", str(source))]
        model = processes.start(
            "model server",
            [
                str(venv_python),
                str(E2E_DIR / "model_server.py"),
                *answers,
                "--port-file",
                str(model_port_file),
                "--request-log",
                str(model_requests_path),
            ],
            model_log,
            work,
            receiver_env,
        )
        wait_for("the model server's port", model_port_file.exists, 30, exited(model, "model server", model_log))
        model_port = int(model_port_file.read_text())

        # 3. NeMo Gym's servers, under the zero-code launcher (the servers inherit it).
        config_paths = [str(gym_site / path) for path in release.gym_configs] + [str(p) for p in release.e2e_configs]
        configs = [arg for path in config_paths for arg in ("--config", path)]
        head = ["+head_server.host=127.0.0.1", f"+head_server.port={head_port}"]
        launcher = [str(bin_dir / "opentelemetry-instrument"), "--", str(bin_dir / "gym")]
        env_start = processes.start(
            "gym env start",
            [
                *launcher,
                "env",
                "start",
                *configs,
                f"+policy_base_url=http://127.0.0.1:{model_port}/v1",
                "+policy_api_key=e2e-dummy-key",
                "+policy_model_name=scripted-model",
                "+skip_venv_if_present=true",
                f"+uv_venv_dir={venvs_root}",
                *head,
                *capture,
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
            "`All N / N servers ready` from gym env start",
            servers_ready,
            TIMEOUT_SERVERS_READY,
            exited(env_start, "gym env start", env_log),
            interval=1,
        )
        count = int(ready.search(env_log.read_text(errors="replace")).group(1))
        if count != release.expected_servers:
            raise E2EFailure(f"expected {release.expected_servers} servers, gym env start started {count}; log: {env_log}")
        log(f"{count} servers ready after {time.monotonic() - started_at:.0f}s")

        # 4. Rollout collection, under the launcher.
        collect = processes.start(
            "gym eval run --no-serve",
            [
                *launcher,
                "eval",
                "run",
                "--no-serve",
                f"+input_jsonl_fpath={inputs}",
                f"+output_jsonl_fpath={rollouts_path}",
                f"+num_repeats={args.repeats}",
                f"+num_samples_in_parallel={args.concurrency}",
                *release.eval_overrides,
                *head,
                *capture,
            ],
            collect_log,
            work,
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
        failures_path = rollouts_path.with_name("rollouts_failures.jsonl")
        if read_jsonl(failures_path):
            raise E2EFailure(f"NeMo Gym recorded {len(read_jsonl(failures_path))} failed rollouts: {failures_path}")
        if len(results) != len(materialized) or not results:
            raise E2EFailure(
                f"rollouts.jsonl has {len(results)} rows for {len(materialized)} dispatched rows; log: {collect_log}"
            )
        log(f"collected {len(results)} rollouts after {time.monotonic() - started_at:.0f}s")

        rollouts = checks.join_rollouts(materialized, results, report)
        result.rollouts = len(rollouts)
        rewards = {r.reward for r in rollouts}
        report.check(
            {0.0, 1.0} <= rewards, f"the scripted model should give both rewards 0.0 and 1.0; got {sorted(rewards, key=str)}"
        )
        verdict_rows = None
        if gym_pass.verdicts is not None:
            verdicts_path = rollouts_path.with_name("rollout_verdicts.jsonl")
            verdict_rows = read_jsonl(verdicts_path)
            report.check(bool(verdict_rows), f"the health pass wrote no {verdicts_path}; log: {collect_log}")

        # 5. Wait (bounded) until the spans have crossed the wire, then stop the servers.
        def spans_arrived() -> bool:
            received = read_received(spans_path)
            if args.without_package:
                paths = [checks._server_path(s) for s in received.spans]
                return paths.count("/verify") >= len(rollouts)
            names = [s.name for s in received.spans]
            counter = checks.rewarded_counter_total(received, checks.Report())
            rewarded = sum(1 for s in received.spans if s.name == checks.VERIFY_SPAN and checks.REWARD in s.attributes)
            return (
                names.count(checks.DISPATCH_SPAN) >= len(rollouts)
                and names.count(checks.VERIFY_SPAN) >= len(rollouts)
                and (verdict_rows is None or names.count(checks.HEALTH_SPAN) >= len(verdict_rows))
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
        checks.check_http_propagation(rollouts, received, release.flat_run_hops, report)
        checks.check_no_leaked_request_context(received, report)
        if not args.without_package:
            dispatches = checks.check_gym_spans(rollouts, received, report)
            checks.check_rewarded_counter(received, report)
            checks.check_model_baggage(rollouts, read_jsonl(model_requests_path), report)
            if verdict_rows is not None:
                checks.check_health_spans(rollouts, verdict_rows, dispatches, received, gym_pass.verdicts, report)
                checks.check_verdicts_counter(received, report)
            excerpt = checks.excerpt_lines(rollouts, received)
            if excerpt:
                (work / "SPANS_EXCERPT.json").write_text("\n".join(excerpt) + "\n")
        return result
    except E2EFailure as error:
        report.fail(str(error))
        return result
    finally:
        survivors = processes.stop_all(marker)
        if survivors:
            report.fail(f"processes of this run still alive after stopping: {survivors}")
        for entry in scratch.ray_tmp.iterdir():  # Ray's session files: this pass's only
            shutil.rmtree(entry, ignore_errors=True)
        log(f"{result.label}: done in {time.monotonic() - started_at:.0f}s; logs in {work}")


def run_inprocess(release: Release, venv_python: Path, marker: str, scratch: Scratch) -> PassResult:
    """The release's in-process check, with its venv's Python and no OpenTelemetry environment."""
    result = PassResult(f"nemo-gym {release.version} / in-process ({release.inprocess_check.name})")
    log_path = WORK / release.version / "inprocess.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({RUN_MARKER_VAR: marker, "TMPDIR": str(scratch.tmpdir), "PYTHONUNBUFFERED": "1"})
    with log_path.open("w") as out:
        completed = subprocess.run(
            [str(venv_python), str(release.inprocess_check)],
            cwd=scratch.tmpdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
        )
    lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()]
    passed = sum(1 for line in lines if line.startswith("ok"))
    result.report.notes.append(f"{passed} checks passed; log: {log_path}")
    if completed.returncode != 0:
        failed = "\n".join(line for line in lines if line.startswith("FAIL")) or tail(log_path)
        result.report.fail(f"{release.inprocess_check.name} exited {completed.returncode}; log: {log_path}\n{failed}")
    return result


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    started_at = time.monotonic()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    releases = [r for r in RELEASES if not args.release or r.version in args.release]
    if not releases:
        raise E2EFailure(f"no release among {[r.version for r in RELEASES]} matches {args.release}")
    marker = uuid.uuid4().hex
    tmp_before = tmp_entries()
    scratch = Scratch.create()
    results: list[PassResult] = []
    try:
        for release in releases:
            venv_python = ensure_venv(release, with_package=not args.without_package)
            for gym_pass in release.passes:
                log(
                    f"nemo-gym {release.version}, pass {gym_pass.name} (model-call capture {'on' if gym_pass.capture else 'off'})"
                )
                results.append(run_pass(release, gym_pass, venv_python, marker, scratch, args))
            if release.inprocess_check is not None and not args.without_package:
                results.append(run_inprocess(release, venv_python, marker, scratch))
    finally:
        scratch.remove()
        left_in_tmp = sorted(tmp_entries() - tmp_before)
    if left_in_tmp:
        results.append(
            PassResult("temporary folders", report=checks.Report(failures=[f"left in {tempfile.gettempdir()}: {left_in_tmp}"]))
        )

    if args.write_excerpt and not any(r.report.failures for r in results):
        write_excerpt(releases)
    return summarize(results, time.monotonic() - started_at, args)


def summarize(results: list[PassResult], elapsed: float, args: argparse.Namespace) -> int:
    print()
    for result in results:
        status = "FAILED" if result.report.failures else "passed"
        spans = ", ".join(f"{count} {name}" for name, count in sorted(result.report.spans_checked.items()))
        figures = f": {result.rollouts} rollouts, spans checked: {spans}" if result.rollouts else ""
        print(f"{result.label}: {status}{figures}")
        for note in result.report.notes:
            print(f"    {note}")
        for failure in result.report.failures:
            print(f"  - {failure}")
    failed = sum(len(r.report.failures) for r in results)
    mode = "pipeline and HTTP propagation only (--without-package)" if args.without_package else "all assertions"
    if failed:
        log(f"FAILED after {elapsed:.0f}s: {failed} problem(s); logs in {WORK}")
        return 1
    log(f"PASSED ({mode}) in {elapsed:.0f}s; logs in {WORK}")
    return 0


def write_excerpt(releases: list[Release]) -> None:
    sections = []
    for release in releases:
        gym_pass = release.passes[0]
        excerpt = WORK / release.version / gym_pass.name / "SPANS_EXCERPT.json"
        if excerpt.exists():
            sections.append(f"## NeMo Gym {release.version} ({gym_pass.name})\n\n```json\n{excerpt.read_text()}```\n")
    EXCERPT.write_text(
        "# Spans from the end-to-end run\n\n"
        "Written by `python3 e2e/run.py --write-excerpt` (the `make e2e` run): per release, one rollout's trace as\n"
        "the OTLP receiver got it: the path from the collector's dispatch to the resources server's verify, across\n"
        "processes, and on 0.7.0 the health span under the dispatch, trimmed to names, ids and the `nemo.gym.*`\n"
        "attributes. The HTTP spans come from the aiohttp-client and FastAPI instrumentations.\n\n" + "\n".join(sections)
    )
    log(f"wrote {EXCERPT.relative_to(REPO)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--without-package",
        action="store_true",
        help="do not install gym_instrument; check the pipeline and HTTP propagation only",
    )
    parser.add_argument(
        "--release",
        action="append",
        choices=[r.version for r in RELEASES],
        help="run this release only (repeatable; default: all)",
    )
    parser.add_argument("--repeats", type=int, default=NUM_REPEATS, help=f"rollouts per task (default {NUM_REPEATS})")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts in flight at once (default 4)")
    parser.add_argument("--write-excerpt", action="store_true", help=f"refresh {EXCERPT.relative_to(REPO)} after a passing run")
    args = parser.parse_args()
    return run_main(lambda: run(args), lambda: WORK)


if __name__ == "__main__":
    sys.exit(main())
