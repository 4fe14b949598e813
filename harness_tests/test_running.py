"""The parts of a run that touch the e2e venv and the receiver's output (``gym_harness.bench.running``): the
span count, and the start-up hooks and sampler it installs, each in a real fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gym_harness import processes
from gym_harness.bench import hand, running, workload

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_spans_by_name_counts_spans_between_offsets_and_skips_metrics(tmp_path: Path) -> None:
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
    assert running.spans_by_name(path, 0, None) == Counter({"POST /run": 1, "gym.verify": 2})
    assert running.spans_by_name(path, len(first.encode()), None) == Counter({"gym.verify": 2})


def test_the_drop_ours_sampler_is_found_by_the_sdk_and_drops_only_the_package_s_spans(tmp_path: Path) -> None:
    # Installed as the run installs it, in a folder of its own on a fresh interpreter's path; the SDK's
    # configurator finds it by the name OTEL_TRACES_SAMPLER gives, and a real provider records with it.
    site = tmp_path / "site"
    site.mkdir()
    running.install_sampler(site)
    code = f"""
import sys
sys.path.insert(0, {str(site)!r})
from opentelemetry.sdk._configuration import _import_sampler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import trace

provider = TracerProvider(sampler=_import_sampler({workload.SAMPLER_MODULE!r}))
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
    running.remove_sampler(site)
    assert [path.name for path in site.rglob("*") if workload.SAMPLER_MODULE in path.name] == []  # bytecode too


def test_a_start_up_hook_runs_in_a_fresh_interpreter_and_leaves_nothing_once_removed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    running.install_hook(site, running.GC_HOOK, "gc_hook.py")
    code = f"import site, sys; site.addsitedir({str(site)!r}); print({running.GC_HOOK!r} in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as an interpreter may: caches
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.strip() == "True"  # the .pth imported it
    assert any(running.GC_HOOK in path.name for path in (site / "__pycache__").iterdir())
    running.remove_hook(site, running.GC_HOOK)
    assert [path.name for path in site.rglob("*") if running.GC_HOOK in path.name] == []  # bytecode too


def test_lean_starts_its_ray_cluster_without_the_launcher_or_opentelemetry() -> None:
    launcher = ["/v/bin/opentelemetry-instrument", "--"]
    env = {
        **workload.configuration_env("lean", {"OTEL_SERVICE_NAME": "x", processes.RUN_MARKER_VAR: "m"}),
        "GYM_BENCH_GC_DIR": "/w/gc",
        "GYM_BENCH_PROFILE_DIR": "/w/p",
    }
    command, ray_env = running.ray_start_as("lean", launcher, env)
    assert command == []
    assert [k for k in ray_env if k.startswith(("OTEL_", "GYM_BENCH_PROFILE"))] == []
    # Still one of the run's processes: found by its marker, its GC pauses counted, like every configuration's Ray.
    assert ray_env[processes.RUN_MARKER_VAR] == "m" and ray_env["GYM_BENCH_GC_DIR"] == "/w/gc"
    for name in ("contrib", "full"):  # under the launcher, as `gym env start` would start it
        assert running.ray_start_as(name, launcher, env) == (launcher, env)
    none = workload.configuration_env("none", env)
    assert running.ray_start_as("none", [], none) == ([], none)  # no launcher anywhere, nothing taken away


def test_hand_s_variable_reaches_only_its_launched_processes() -> None:
    launcher = ["/v/bin/opentelemetry-instrument", "--"]
    env = {
        **workload.configuration_env("hand", {"OTEL_SERVICE_NAME": "x", processes.RUN_MARKER_VAR: "m"}),
        "GYM_BENCH_GC_DIR": "/g",
    }
    command, ray_env = running.ray_start_as("hand", launcher, env)
    # Ray's cluster as gym's: no launcher, no OpenTelemetry, and no hand-written spans armed in Ray's workers.
    assert command == [] and hand.ACTIVE_VAR not in ray_env and not [k for k in ray_env if k.startswith("OTEL_")]
    assert ray_env[processes.RUN_MARKER_VAR] == "m" and ray_env["GYM_BENCH_GC_DIR"] == "/g"
    assert running.ray_start_as("gym", launcher, workload.configuration_env("gym", env))[1].keys() == ray_env.keys()


def test_a_run_s_sizes_alternate_which_goes_first() -> None:
    assert [running.size_order([200, 800], number) for number in (1, 2, 3)] == [(200, 800), (800, 200), (200, 800)]


def test_a_configuration_whose_port_was_taken_is_started_again_in_a_folder_of_its_own(tmp_path: Path, monkeypatch: Any) -> None:
    # The rule alone (starting real servers is make bench-e2e's): a port taken is retried, with the
    # first attempt's processes stopped; any other failure is the run's at once.
    stopped: list[str] = []

    class Started:
        def __init__(self, marker: str) -> None:
            self.marker = marker
            self.processes = self

        def stop_all(self, marker: str) -> list[int]:
            stopped.append(marker)
            return []

    folders: list[Path] = []

    def start(name: str, work: Path, *rest: Any) -> Any:
        started = rest[4]
        folders.append(work)
        work.mkdir(parents=True)
        started[name] = Started(f"m{len(folders)}")
        if len(folders) == 1:
            (work / "gym_env_start.log").write_text("ERROR: [Errno 98] error while attempting to bind: address already in use\n")
            raise processes.E2EFailure("gym env start exited with code 1")
        return started[name]

    monkeypatch.setattr(running, "start_configuration", start)
    configs: dict[str, Any] = {}
    config = running.start_retrying("gym", tmp_path / "gym", Path("python"), None, tmp_path, None, configs)
    assert configs == {"gym": config} and config.marker == "m2"
    assert stopped == ["m1"] and folders == [tmp_path / "gym", tmp_path / "gym-start-2"]

    def fails(name: str, work: Path, *rest: Any) -> Any:
        rest[4][name] = Started("other")
        raise processes.E2EFailure("gym env start exited with code 1: something else")

    monkeypatch.setattr(running, "start_configuration", fails)
    try:
        running.start_retrying("gym", tmp_path / "other", Path("python"), None, tmp_path, None, {})
    except processes.E2EFailure as failure:
        assert "something else" in str(failure)
    else:
        raise AssertionError("a failure other than a taken port was retried")
