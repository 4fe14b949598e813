"""The report of a run at several sizes (``--sizes``): what a collection costs whatever its size, what each rollout
adds, and what a run of N rollouts costs from the two, beside the launcher's and this package's start costs."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass

from gym_harness.bench.launch import StartCosts
from gym_harness.bench.stats import Collection, median_interval
from gym_harness.bench.workload import CONFIGURATIONS, SETTLE_SECONDS, Workload, blocks_of

# The differences the report gives, each within a round: the package over an untraced run, the spans
# themselves (by hand) over an untraced run, and the package over the same spans by hand.
DIFFERENCES = (("gym", "none"), ("hand", "none"), ("gym", "hand"))
# Run sizes a reader can hold their own against.
EXAMPLES = (400, 10_000, 1_000_000)


@dataclass(frozen=True)
class Line:
    """One round's fit of one configuration: ms per rollout added, and ms of a collection whatever its size."""

    per_rollout: float
    fixed: float


def line_through(points: list[tuple[int, float]]) -> Line:
    """The least-squares line through (rollouts, seconds) points, in ms (two sizes: the line through both)."""
    xs = [float(x) for x, _ in points]
    ys = [y * 1000 for _, y in points]
    mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)
    return Line(slope, mean_y - slope * mean_x)


def round_lines(collections: list[Collection], name: str, what: str) -> dict[int, Line]:
    """Each round's line of ``name`` (wall or CPU of all processes against the run's size); a round with fewer
    than two sizes of it is left out."""
    by_round: dict[int, list[tuple[int, float]]] = {}
    for c in collections:
        if c.configuration == name:
            by_round.setdefault(c.round, []).append((c.rollouts, c.wall if what == "wall" else c.cpu_total))
    return {number: line_through(points) for number, points in sorted(by_round.items()) if len({x for x, _ in points}) > 1}


def _with_interval(values: list[float], digits: int, sign: str = "") -> str:
    low, high = median_interval(values)
    return f"{statistics.median(values):{sign}.{digits}f} ({low:{sign}.{digits}f} to {high:{sign}.{digits}f})"


def differences(collections: list[Collection], top: str, bottom: str, what: str) -> tuple[list[float], list[float]]:
    """The rounds' own differences of ``top`` and ``bottom``'s lines: per rollout, and fixed."""
    mine, theirs = round_lines(collections, top, what), round_lines(collections, bottom, what)
    rounds = sorted(set(mine) & set(theirs))
    return [mine[n].per_rollout - theirs[n].per_rollout for n in rounds], [mine[n].fixed - theirs[n].fixed for n in rounds]


def sizes_report(
    workload: Workload,
    collections: list[Collection],
    header: list[str],
    quick: bool,
    busy: bool,
    elapsed: float,
    costs: StartCosts,
    same: list[str],
) -> str:
    """The Markdown of a ``--sizes`` run's section."""
    sizes = workload.sizes
    names = [n for n in CONFIGURATIONS if any(c.configuration == n for c in collections)]
    listed = " and ".join(f"{size} ({size // workload.repeats} tasks x {workload.repeats})" for size in sizes)
    lines = [
        "## A whole real run at several sizes: what a run of N rollouts costs",
        "",
        "`make bench-e2e` (`benchmarks/whole_run.py`; `make bench` keeps this section as it is): real `gym env start` and "
        f"`gym eval run --no-serve` collections of {listed} mcqa rollouts, concurrency {workload.concurrency}, model-call "
        "capture and the health pass on, against a scripted model on 127.0.0.1; each configuration with its own servers, "
        "receiver and model, its processes stopped (SIGSTOP) while another collects; in every round each configuration "
        "collects at every size, the sizes back to back (which goes first alternates by round); "
        f"{workload.rounds} round(s) in {len(blocks_of(workload.rounds, workload.blocks))} block(s), every configuration "
        "started afresh for each block. CPU is every process of the configuration (collector, servers, Ray, model, "
        f"receiver), from `/proc` and `wait4`, read {SETTLE_SECONDS:g} s after the collector exits. Each round fits each "
        "configuration's line through its sizes: the slope is what a rollout adds, the intercept what a collection costs "
        "whatever its size (the collector's start, its set-up, the health pass's fixed part, the exporters' last flush).",
        "",
    ]
    if quick:
        lines += ["**Quick run (tiny sizes): these figures prove the harness runs; they judge nothing.**", ""]
    if busy:
        lines += ["**Measured on a busy machine** (other processes used CPU during the run).", ""]
    lines += [*header, f"- Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s", ""]

    at_sizes = " / ".join(str(size) for size in sizes)
    lines += [
        f"| configuration | wall at {at_sizes} (median) | CPU at {at_sizes} (median) | CPU per rollout added "
        "(median, 95% interval) | CPU of a collection whatever its size (median, 95% interval) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        mine = [c for c in collections if c.configuration == name]
        walls = " / ".join(f"{statistics.median(c.wall for c in mine if c.rollouts == size):.2f} s" for size in sizes)
        cpus = " / ".join(f"{statistics.median(c.cpu_total for c in mine if c.rollouts == size):.2f} s" for size in sizes)
        fitted = list(round_lines(collections, name, "cpu").values())
        per_rollout = _with_interval([f.per_rollout for f in fitted], 2) + " ms" if fitted else ""
        fixed = _with_interval([f.fixed for f in fitted], 0) + " ms" if fitted else ""
        lines.append(f"| {name} | {walls} | {cpus} | {per_rollout} | {fixed} |")

    pairs = [(top, bottom) for top, bottom in DIFFERENCES if top in names and bottom in names]
    found: dict[tuple[str, str], tuple[float, float]] = {}
    if pairs:
        lines += [
            "",
            "Within a round, the difference of two configurations' lines (the median of the rounds' own, 95% interval):",
            "",
            "| difference | CPU per rollout | CPU per collection, whatever its size | wall per rollout | wall per collection |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for top, bottom in pairs:
            cpu_per_rollout, cpu_fixed = differences(collections, top, bottom, "cpu")
            wall_per_rollout, wall_fixed = differences(collections, top, bottom, "wall")
            if not cpu_per_rollout:
                continue
            found[(top, bottom)] = (statistics.median(cpu_per_rollout), statistics.median(cpu_fixed))
            lines.append(
                f"| {top} - {bottom} | {_with_interval(cpu_per_rollout, 3, '+')} ms | {_with_interval(cpu_fixed, 0, '+')} ms | "
                f"{_with_interval(wall_per_rollout, 3, '+')} ms | {_with_interval(wall_fixed, 0, '+')} ms |"
            )

    lines += [
        "",
        f"**Start costs** (`gym_harness/bench/launch.py`, as `python3 -m benchmarks.launch_cost` measures them: "
        f"{costs.rounds} rounds on this machine right after the collections, median of each round's own difference, "
        f"95% interval): OpenTelemetry's launcher adds {costs.launcher} of CPU to a process's start, this package on it "
        f"{costs.package}, together {costs.together}. Each collection starts one process under the launcher, the "
        "collector: its start is inside the fixed part above.",
    ]
    lines += ["", *cost_lines(found, costs, collections)]
    if same:
        lines += ["", *same]
    verdict_sizes = ", ".join(str(size) for size in sizes)
    lines += [
        "",
        f"Every configuration wrote the same rows with the same rewards per task at each size ({verdict_sizes}) in every "
        "round (checked).",
    ]
    return "\n".join(lines).rstrip() + "\n"


def cost_lines(found: dict[tuple[str, str], tuple[float, float]], costs: StartCosts, collections: list[Collection]) -> list[str]:
    """What a run of N rollouts costs, as a user computes it from the lines."""
    if ("gym", "none") not in found:
        return []
    per_rollout, fixed = found[("gym", "none")]
    parts = [
        f"**What a run of N rollouts costs.** Against servers already running (`gym eval run --no-serve`), this package "
        f"adds about {fixed:.0f} ms + N x {per_rollout:.3f} ms of CPU to an untraced run (all processes)"
    ]
    if ("gym", "hand") in found:
        hand_per_rollout, hand_fixed = found[("gym", "hand")]
        parts.append(f", and {hand_fixed:+.0f} ms + N x {hand_per_rollout:+.3f} ms to a run with the same spans written by hand")
    parts.append(
        f". A run that starts its own servers (`gym env start`) adds {costs.together.median:.0f} ms more for each process "
        f"it starts under the launcher ({costs.package.median:.0f} ms of it this package's), once per run, whatever N."
    )
    lines = ["".join(parts)]
    lines_of = {name: round_lines(collections, name, "cpu") for name in ("none", "hand", "gym")}
    medians = {
        name: (statistics.median(f.fixed for f in fitted.values()), statistics.median(f.per_rollout for f in fitted.values()))
        for name, fitted in lines_of.items()
        if fitted
    }
    if "none" in medians and "gym" in medians:

        def total(name: str, rollouts: int) -> float:
            fixed_ms, per_rollout_ms = medians[name]
            return fixed_ms + rollouts * per_rollout_ms

        examples = []
        for rollouts in EXAMPLES:
            ratio = f"gym / none {total('gym', rollouts) / total('none', rollouts):.3f}"
            if "hand" in medians:
                ratio += f", gym / hand {total('gym', rollouts) / total('hand', rollouts):.3f}"
            examples.append(f"{rollouts:,} rollouts: {ratio}")
        lines += [
            "",
            "From the medians of the lines, CPU of all processes of a collection: " + "; ".join(examples) + ".",
        ]
    return lines
