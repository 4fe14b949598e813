"""The profile's figures (``gym_harness.bench.profile``, ``render_profile``): where code lives, real pstats
files read back, the servers kept apart from the collector."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gym_harness.bench import profile, render_profile

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


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
def test_profile_categories(filename: str, category: str) -> None:
    assert profile.category_of(filename) == category


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


def test_a_profile_keeps_the_collector_apart_from_the_servers(tmp_path: Path) -> None:
    server = ["/venv/bin/python", "/gym/resources_servers/mcqa/app.py"]
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run", "--no-serve", "+ray_head_node_address=127.0.0.1:1"]
    _profiled_process(tmp_path, 11, server, "/gym/resources_servers/mcqa", "/venv/site-packages/opentelemetry/baggage/x.py", 30)
    _profiled_process(tmp_path, 12, collector, "/work/full", "/work/main/gym_instrument/plan.py", 50)
    servers = profile.read_profiles(tmp_path, "full", 10, "servers")
    alone = profile.read_profiles(tmp_path, "full", 10, "collector")
    propagation, package = "propagation (baggage, W3C trace context)", "gym_instrument (the package's own code)"
    assert servers.calls_by_category.get(propagation) == 3.0 and package not in servers.calls_by_category
    assert list(servers.by_server) == ["mcqa"] and servers.gc_collections == [1, 0, 0]
    assert alone.calls_by_category.get(package) == 5.0 and propagation not in alone.calls_by_category
    assert alone.package_functions["plan.py:work"][2] == 5.0
    text = "\n".join(render_profile.profile_lines([servers, alone]))
    servers_part, collector_part = text.split("#### The collector")
    assert "`plan.py:work`" in collector_part and "`plan.py:work`" not in servers_part
    assert "| mcqa |" in servers_part


def test_the_collector_s_calls_are_counted_full_against_contrib(tmp_path: Path) -> None:
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run", "+ray_head_node_address=127.0.0.1:1"]
    server = ["/venv/bin/python", "app.py"]
    for name, package_calls in (("contrib", 0), ("full", 40)):
        (tmp_path / name).mkdir()
        _profiled_process(tmp_path / name, 1, collector, "/w", "/venv/site-packages/aiohttp/client.py", 200)
        _profiled_process(tmp_path / name, 2, server, "/g/mcqa", "/venv/site-packages/aiohttp/web.py", 900)
        if package_calls:
            _profiled_process(tmp_path / name, 3, collector, "/w", "/work/main/gym_instrument/roles.py", package_calls)
    profiles = [
        profile.read_profiles(tmp_path / name, name, 10, part)
        for name in ("contrib", "full")
        for part in ("servers", "collector")
    ]
    collector_part = "\n".join(render_profile.profile_lines(profiles)).split("#### The collector")[1]
    package = "gym_instrument (the package's own code)"
    # Per 10 rollouts: each `work` call also calls the builtin `sum`, and each profile ends in one call of
    # `disable`. contrib's collector: 200 + 200 + 1 = 401 calls (the server's 1801 are not the collector's); full's
    # extra process: 40 + 40 + 1, of which the 40 `work` calls are the package's.
    assert f"| {package} | 0.0 | 4.0 | +4.0 | +9.98% |" in collector_part
    assert "| **all** | 40.1 | 48.2 | +8.1 | +20.20% |" in collector_part


def test_the_collector_s_breakdown_splits_its_extra_calls_by_whose_work_they_are(tmp_path: Path) -> None:
    collector = ["/venv/bin/python", "/venv/bin/gym", "eval", "run"]
    places = {"sdk": "/venv/site-packages/opentelemetry/sdk/trace/x.py", "ours": "/work/main/gym_instrument/roles.py"}
    for name, calls in (("contrib", {"sdk": 30}), ("full", {"sdk": 90, "ours": 20})):
        (tmp_path / name).mkdir()
        for pid, (place, count) in enumerate(calls.items(), start=1):
            _profiled_process(tmp_path / name, pid, collector, "/w", places[place], count)
    profiles = [profile.read_profiles(tmp_path / name, name, 10, "collector") for name in ("contrib", "full")]
    text = "\n".join(render_profile.collector_lines(profiles))
    # Per 10 rollouts, each `work` call also calls the builtin `sum` (the host's share) and each profile one
    # `disable`: contrib 30 + 30 + 1 = 61 calls; full 90 + 90 + 1 + 20 + 20 + 1 = 222, 161 more (+263.93%),
    # 6 more span calls per rollout (+98.36%), the package's 2 (+32.79%), the rest 8.1 (+132.79%).
    assert "full - contrib = +16.1 Python calls per rollout, +263.93% of contrib's" in text
    assert "exported) +6.0 (+98.36%); the package's own code and wrapt +2.0 (+32.79%);" in text
    assert "the standard library) +8.1 (+132.79%)." in text


def test_the_profile_counts_calls_by_place_and_gives_shares_only_of_a_cost() -> None:
    propagation, package = "propagation (baggage, W3C trace context)", "gym_instrument (the package's own code)"
    work = profile.OTHER
    times = {category: 1.0 for category, _ in profile.CATEGORIES}
    contrib = profile.Profile(
        "contrib", 400, {"mcqa": 10.0}, dict(times), {}, calls_by_category={propagation: 100.0, work: 9900.0}
    )
    full = profile.Profile(
        "full",
        400,
        {"mcqa": 11.0},
        {**times, package: 1.5, propagation: 1.4},
        {},
        calls_by_category={propagation: 400.0, work: 9900.0, package: 70.0},
    )
    text = "\n".join(render_profile.profile_lines([contrib, full]))
    # 300 more baggage calls and 70 of the package's, of contrib's 10,000
    assert f"| {propagation} | 100.0 | 400.0 | +300.0 | +3.00% |" in text
    assert f"| {package} | 0.0 | 70.0 | +70.0 | +0.70% |" in text
    assert "| **all** | 10000.0 | 10370.0 | +370.0 | +3.70% |" in text
    # the package's own code +0.5 of the servers' +0.9 in time: its share is given
    assert "the package's own code +0.500 (56%: per request" in text
    cheaper = dataclasses.replace(full, by_category={**times, package: 1.5, propagation: 0.0})  # -0.5 in all
    text = "\n".join(render_profile.profile_lines([contrib, cheaper]))
    assert "the package's own code +0.500 (per request" in text and "%: per request" not in text
