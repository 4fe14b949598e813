#!/usr/bin/env python3
"""End-to-end test of gym_instrument against the released NeMo Gym, over real HTTP and OTLP.

For each release in gym_harness/releases.py (0.4.0 on Python 3.12, 0.7.0 on Python 3.13), from nothing:
  1. finds the release's Python and builds its venv with the nemo-gym wheel from PyPI, this
     repository's package (editable), the OpenTelemetry launcher/distro/OTLP-HTTP exporter, the
     aiohttp-client and FastAPI instrumentations, and the `oteltap` OTLP receiver (skipped when
     the venv's stamp matches);
  2. per pass (0.7.0: once with model-call capture on, once with it off):
     a. starts `oteltap` (OTLP/HTTP protobuf) and the scripted model server (gym_harness/model_server.py),
        both on 127.0.0.1;
     b. starts NeMo Gym's servers from the wheel's configs (and e2e/configs/) with
        `opentelemetry-instrument -- gym env start …`, waits for `All N / N servers ready`;
     c. collects rollouts with `opentelemetry-instrument -- gym eval run --no-serve …`;
     d. checks what the receiver got against rollouts.jsonl and, where the release has a health
        pass, rollout_verdicts.jsonl (checks.py), and stops everything it started;
  3. on 0.7.0, the sharded flow (e2e/sharded.py): two shard collectors at once, `gym eval
     aggregate`, then `gym eval health-check` elsewhere; each health pass's spans are children
     of the shards' dispatches;
  4. runs the release's in-process check (0.7.0: inprocess_070.py) with the venv's Python.

Usage, from the repository's root (``-m`` puts the root on the path: the harness, ``gym_harness``,
is imported by name):
    python3 -m e2e.run                    # every release, every pass
    python3 -m e2e.run --release 0.7.0    # one release
    python3 -m e2e.run --without-package  # the pipeline with HTTP instrumentation only
    python3 -m e2e.run --write-excerpt    # also refresh e2e/SPANS_EXCERPT.md

Runs on any Python 3.9+ with the standard library; logs of the last run stay in `.e2e-work/`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from e2e import checks
from e2e.sharded import PassResult, run_sharded
from gym_harness.environment import Scratch, base_env
from gym_harness.gym_servers import gym_configs, server_venvs, start_servers
from gym_harness.jsonl import read_jsonl
from gym_harness.otlp_json import read_received
from gym_harness.paths import E2E_DIR, MODEL_SERVER, REPO, WORK
from gym_harness.processes import (
    RUN_MARKER_VAR,
    E2EFailure,
    Processes,
    exited,
    free_port,
    log,
    port_open,
    run_main,
    tail,
    wait_for,
)
from gym_harness.releases import RELEASES, Pass, Release
from gym_harness.venvs import ensure_venv

EXCERPT = E2E_DIR / "SPANS_EXCERPT.md"

NUM_REPEATS = 2
# Temporary folders Gym and Ray leave in TMPDIR, and Ray's default RAY_TMPDIR: none may appear in
# /tmp (the run's own short RAY_TMPDIR fallback there is removed in a `finally`).
LEFTOVER_TMP_PATTERNS = ("tmp*wandb-*", "pymp-*", "ray")

TIMEOUT_COLLECTION = 300
TIMEOUT_SPANS = 60
TIMEOUT_STOP = 20


# ---------------------------------------------------------------------------------------------
# Temporary folders
# ---------------------------------------------------------------------------------------------


def tmp_entries() -> set[str]:
    root = Path(tempfile.gettempdir())
    return {path.name for pattern in LEFTOVER_TMP_PATTERNS for path in root.glob(pattern)}


# ---------------------------------------------------------------------------------------------
# One pass: servers, collection, checks
# ---------------------------------------------------------------------------------------------


def write_inputs(release: Release, path: Path) -> Path:
    path.write_text("".join(source.read_text() for source in release.inputs))
    return path


def run_pass(
    release: Release, gym_pass: Pass, venv_python: Path, marker: str, scratch: Scratch, args: argparse.Namespace
) -> PassResult:
    result = PassResult(f"nemo-gym {release.name} / {gym_pass.name}")
    report = result.report
    work = WORK / release.name / gym_pass.name
    work.mkdir(parents=True)
    bin_dir = release.venv / "bin"
    receiver_port = free_port()
    head_port = free_port()
    env = {**base_env(release.venv, marker, receiver_port, scratch), **dict(gym_pass.env)}
    span_folder = work / "spans"
    if gym_pass.span_files:  # to the receiver and, as docs/nemo-gym.md shows, a file per process
        env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp,gym_json_file",
                "OTEL_METRICS_EXPORTER": "otlp,gym_json_file",
                "OTEL_PYTHON_GYM_JSON_FILE": f"{span_folder}/",
            }
        )
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

    venvs_root = server_venvs(release, work)

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
                str(MODEL_SERVER),
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
        head = ["+head_server.host=127.0.0.1", f"+head_server.port={head_port}"]
        launcher = [str(bin_dir / "opentelemetry-instrument"), "--", str(bin_dir / "gym")]
        overrides = [f"+uv_venv_dir={venvs_root}", *head, *capture]
        configs = gym_configs(release, venv_python)
        env_start, count = start_servers(processes, launcher, configs, model_port, overrides, env_log, work)
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
                and sum(1 for s in received.spans if checks.is_model_call(s)) >= len(read_jsonl(model_requests_path))
            )

        try:
            wait_for("the spans of every rollout at the receiver", spans_arrived, TIMEOUT_SPANS, interval=1)
        except E2EFailure as error:
            report.notes.append(str(error))  # the checks below say precisely what is missing
        time.sleep(2)  # anything late (a duplicate) would arrive now
        processes.interrupt(env_start, timeout=TIMEOUT_STOP)
        time.sleep(1)

        received = read_received(spans_path)
        if release.contrib:  # the HTTP spans are contrib's; without it only the package's spans are checked
            checks.check_http_propagation(rollouts, received, release.flat_run_hops, report)
            checks.check_no_leaked_request_context(received, report)
        else:
            checks.check_no_client_spans(received, report)
            if ("OTEL_PYTHON_GYM_SERVER_TELEMETRY", "false") in gym_pass.env:
                checks.check_only_package_spans(received, report)
        if not args.without_package:
            dispatches = checks.check_gym_spans(rollouts, received, report)
            checks.check_rewarded_counter(received, report)
            model_requests = read_jsonl(model_requests_path)
            checks.check_model_baggage(rollouts, model_requests, report)
            checks.check_one_traceparent(model_requests, report)
            checks.check_model_calls(rollouts, received, model_requests, dispatches, report)
            checks.check_dispatch_totals(rollouts, dispatches, report)
            if verdict_rows is not None:
                checks.check_health_spans(rollouts, verdict_rows, dispatches, received, gym_pass.verdicts, report)
                checks.check_verdicts_counter(received, report)
            if gym_pass.span_files:
                checks.check_report_of_files(bin_dir / "gym-instrument", span_folder, rollouts, work, report)
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
    result = PassResult(f"nemo-gym {release.name} / in-process ({release.inprocess_check.name})")
    log_path = WORK / release.name / "inprocess.log"
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
    releases = [r for r in RELEASES if not args.release or r.name in args.release]
    if not releases:
        raise E2EFailure(f"no release among {[r.name for r in RELEASES]} matches {args.release}")
    marker = uuid.uuid4().hex
    tmp_before = tmp_entries()
    scratch = Scratch.create(WORK)
    results: list[PassResult] = []
    try:
        for release in releases:
            venv_python = ensure_venv(release, with_package=not args.without_package)
            for gym_pass in () if args.only_sharded else release.passes:
                log(f"nemo-gym {release.name}, pass {gym_pass.name} (model-call capture {'on' if gym_pass.capture else 'off'})")
                results.append(run_pass(release, gym_pass, venv_python, marker, scratch, args))
            if release.sharded and not args.without_package and not args.skip_sharded:
                log(f"nemo-gym {release.name}, the sharded flow (model-call capture on)")
                results.append(run_sharded(release, venv_python, marker, scratch, args.repeats))
            if release.inprocess_check is not None and not args.without_package and not args.only_sharded:
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
        excerpt = WORK / release.name / gym_pass.name / "SPANS_EXCERPT.json"
        if excerpt.exists():
            sections.append(f"## NeMo Gym {release.name} ({gym_pass.name})\n\n```json\n{excerpt.read_text()}```\n")
    EXCERPT.write_text(
        "# Spans from the end-to-end run\n\n"
        "Written by `python3 -m e2e.run --write-excerpt` (the `make e2e` run): per release, one rollout's trace as\n"
        "the OTLP receiver got it: the path from the collector's dispatch to the resources server's verify, across\n"
        "processes, then the path to one of its model calls (the model server's `chat …` span), and on 0.7.0 the\n"
        "health span under the dispatch, trimmed to names, ids and the `nemo.gym.*` and `gen_ai.*` attributes (the\n"
        "dispatch's `gen_ai.usage.*` are the rollout's token totals). The HTTP spans come from the aiohttp-client\n"
        "and FastAPI instrumentations; the 0.7.0-bare run has neither (the package alone): its `SERVER` and\n"
        "`fastapi.endpoint` spans are FastAPI 0.165's own.\n\n" + "\n".join(sections)
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
        choices=[r.name for r in RELEASES],
        help="run this release only (repeatable; default: all)",
    )
    parser.add_argument("--repeats", type=int, default=NUM_REPEATS, help=f"rollouts per task (default {NUM_REPEATS})")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts in flight at once (default 4)")
    parser.add_argument("--skip-sharded", action="store_true", help="skip the sharded flow (aggregate, health-check)")
    parser.add_argument("--only-sharded", action="store_true", help="of each release, run the sharded flow only")
    parser.add_argument("--write-excerpt", action="store_true", help=f"refresh {EXCERPT.relative_to(REPO)} after a passing run")
    args = parser.parse_args()
    return run_main(lambda: run(args), lambda: WORK)


if __name__ == "__main__":
    sys.exit(main())
