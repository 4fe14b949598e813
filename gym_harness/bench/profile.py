"""Where the servers' and the collector's CPU goes: yappi's profiles (``benchmarks/profile_hook.py`` in every
process) read back, each function's own time put under the place its code lives."""

from __future__ import annotations

import json
import pstats
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gym_harness.bench.proc import group_of

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
