"""The profile's part of the report (``--profile``): own time and calls per rollout by place, for the
servers and for the collector, and the package's own functions."""

from __future__ import annotations

from gym_harness.bench.profile import CATEGORIES, OTHER, Profile
from gym_harness.bench.workload import CONFIGURATIONS


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
