"""The whole run's report, as the Markdown of its RESULTS.md section: the configurations' table, the goal,
the machine's speed, CPU by process group, the garbage collector's pauses, spans, the package's share."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from gym_harness.bench.profile import Profile
from gym_harness.bench.render_profile import profile_lines
from gym_harness.bench.stats import (
    GOAL,
    GYM_GOAL,
    HAND_GOAL,
    Collection,
    SpeedFit,
    gc_total,
    median_interval,
    ratios,
    round_pairs,
    speed_fit,
    spread,
)
from gym_harness.bench.workload import (
    CONFIGURATIONS,
    GYM_SETTINGS,
    HAND_SETTINGS,
    LEAN_SETTINGS,
    RATIOS,
    RELEASE,
    SETTLE_SECONDS,
    THAW_SECONDS,
    VARIANTS,
    Workload,
    blocks_of,
)


def goal_line(collections: list[Collection], top: str = "full", bottom: str = "contrib", goal: float = GOAL) -> list[str]:
    """A goal (default issue 14's: full / contrib), judged on the medians, with how precisely this run's
    rounds pin each median down; and judged again on the rounds' ratios adjusted for the machine's
    speed (:func:`speed_fit`)."""
    lines: list[str] = []
    for adjusted in (False, True):
        parts = []
        for what, label in (("wall", "wall time"), ("cpu", "CPU of all processes")):
            fit = speed_fit(collections, what) if adjusted else None
            if adjusted and fit is None:
                return lines
            values = ratios(collections, top, bottom, what, fit)
            if not values:
                return lines
            median = statistics.median(values)
            low, high = median_interval(values)
            verdict = "met" if median <= goal else "**NOT met**"
            parts.append(f"{label} {median:.3f} ({verdict}; 95% interval of the median {low:.3f} to {high:.3f})")
        rounds = len(ratios(collections, top, bottom, "wall"))
        if not adjusted:
            lines.append(
                f"**Goal: {top} / {bottom} <= {goal:.2f}**, the median of {rounds} rounds' ratios: " + "; ".join(parts) + ". "
                "The interval is a bootstrap over the rounds: where the median of as many rounds lands with this run's "
                "round-to-round spread."
            )
        else:
            which = "" if (top, bottom) == ("full", "contrib") else f" ({top} / {bottom})"
            lines += [
                "",
                f"**The same rounds{which} adjusted for the machine's speed** (below): " + "; ".join(parts) + ".",
            ]
    return lines


def tracing_line(collections: list[Collection], top: str = "hand", bottom: str = "none") -> str:
    """hand / none beside gym / hand: what the spans themselves cost, written by hand, over an untraced run."""
    parts = []
    for what, label in (("wall", "wall time"), ("cpu", "CPU of all processes")):
        values = ratios(collections, top, bottom, what)
        if not values:
            return ""
        low, high = median_interval(values)
        parts.append(f"{label} {statistics.median(values):.3f} (95% interval of the median {low:.3f} to {high:.3f})")
    return (
        f"**Beside it, {top} / {bottom}**: the price of tracing itself, the same spans written by hand against no tracing "
        "(OpenTelemetry's launcher, SDK and exporter included), the median of the rounds' ratios: " + "; ".join(parts) + "."
    )


def compared(collections: list[Collection]) -> tuple[str, str]:
    """The pair the per-group tables and the speed paragraph compare: full / contrib, or in a run without them
    gym / hand (``--configurations none,hand,gym``) or gym / none (``--configurations none,gym``)."""
    if not round_pairs(collections):
        for pair in (("gym", "hand"), ("gym", "none")):
            if round_pairs(collections, *pair):
                return pair
    return "full", "contrib"


def difference_pairs(collections: list[Collection]) -> list[tuple[str, str]]:
    """The differences the per-group tables show, one column each: the compared pair's, and hand - none beside
    gym - hand (the price of the spans themselves, apart from the package's)."""
    pairs = [compared(collections)]
    if pairs[0] == ("gym", "hand") and round_pairs(collections, "hand", "none"):
        pairs.append(("hand", "none"))
    return pairs


def speed_lines(collections: list[Collection]) -> list[str]:
    """What the speed probe saw, how well it explains the collections' spread, and the adjusted ratios'."""
    fits = {what: speed_fit(collections, what) for what in ("wall", "cpu")}
    if any(fit is None for fit in fits.values()):
        return []
    wall, cpu = fits["wall"], fits["cpu"]
    assert wall is not None and cpu is not None

    def spread_of(values: list[float]) -> str:
        return f"{statistics.stdev(values):.3f}" if len(values) > 1 else "-"

    top, bottom = compared(collections)
    raw = {what: ratios(collections, top, bottom, what) for what in fits}
    adjusted = {what: ratios(collections, top, bottom, what, fits[what]) for what in fits}
    return [
        "**The machine's speed.** `benchmarks/speed_probe.py` runs beside the whole run, outside every configuration: "
        "every 50 ms the same small piece of pure-Python work, timed in its own CPU time. Its mean over a collection's "
        f"window ranged from {cpu.spread[0]:.0f} to {cpu.spread[1]:.0f} us per piece in this run: the machine's virtual "
        "CPUs run the same instructions at different speeds from one moment to the next (on a shared host, a core's "
        "other hyperthread given to a neighbour), and every process of a collection slows together. Each collection "
        "against its configuration's mean (logs, least squares over "
        f"{cpu.collections} collections): CPU follows the probe with slope {cpu.slope:.2f} (correlation "
        f"{cpu.correlation:.2f}), wall time with slope {wall.slope:.2f} (correlation {wall.correlation:.2f}). "
        f"Dividing each round's {top} / {bottom} by its two collections' probe ratio to that power takes the "
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


def machine_lines(busy_at_start: float, forced: bool, commit: str) -> list[str]:
    """The machine, the versions and the code a run measured (``commit``: ``benchmarks/sections.py``'s ``code_version``)."""
    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.partition(":")[2].strip()
            break
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
    same: list[str] | None = None,
) -> str:
    """The report; ``same`` is the hand check's (``hand.likeness.same_lines``) when hand and gym both ran."""
    slotted = slotting(workload, len(_present(collections)))
    lines = [
        "## A whole real run: NeMo Gym 0.7.0 end to end",
        "",
        "`make bench-e2e` (`benchmarks/whole_run.py`; `make bench` keeps this section as it is): real `gym env start` and "
        f"`gym eval run --no-serve` collections of {workload.rollouts} mcqa rollouts ({workload.tasks} tasks x "
        f"{workload.repeats}), concurrency {workload.concurrency}, model-call capture and the health pass on, against a "
        f"scripted model on 127.0.0.1; each configuration with its own servers, receiver and model; {slotted}; "
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
        "lean": "full, with Ray's cluster started without the launcher (`ray start` in a plain environment)"
        + "".join(f", `{variable}={value}`" for variable, value in LEAN_SETTINGS),
        "gym": "this package alone: `opentelemetry-instrument`, "
        + ", ".join(f"`{variable}={value}`" for variable, value in GYM_SETTINGS)
        + ", Ray's cluster as lean's",
        "hand": "gym's spans written by hand into NeMo Gym (`gym_harness/bench/hand/patch.py`), this package off: "
        "`opentelemetry-instrument`, "
        + ", ".join(f"`{variable}={value}`" for variable, value in HAND_SETTINGS)
        + ", Ray's cluster as lean's",
    }
    for name in CONFIGURATIONS:
        mine = [c for c in collections if c.configuration == name]
        if not mine:
            continue
        wall = statistics.median(c.wall for c in mine)
        cpu = statistics.median(c.cpu_total for c in mine)
        rollouts = sum(c.rollouts for c in mine)
        per_rollout = sum(spans.get(name, Counter()).values()) / max(rollouts, 1)
        others = statistics.median(c.others for c in mine)
        pair = next(((top, bottom) for top, bottom in _pairs(collections) if top == name), None)
        if pair is not None:
            walls = spread(ratios(collections, *pair, "wall"))
            cpus = spread(ratios(collections, *pair, "cpu"))
            ratio = f"{pair[0]} / {pair[1]}"
            wall_spread = " / ".join(f"{v:.3f}" for v in walls)
            cpu_spread = " / ".join(f"{v:.3f}" for v in cpus)
        else:
            ratio = wall_spread = cpu_spread = ""
        lines.append(
            f"| {name} | {what[name]} | {wall:.2f} s | {cpu:.2f} s | {ratio} | {wall_spread} | {cpu_spread} | "
            f"{per_rollout:.1f} | {others:.2f} |"
        )
    shown = {name: next((pair for pair in _pairs(collections) if pair[0] == name), None) for name in CONFIGURATIONS}
    further = [pair for pair in _pairs(collections) if shown[pair[0]] != pair]
    if further:
        lines += [
            "",
            "Further ratios within a round, min / median / max: "
            + "; ".join(
                f"{top} / {bottom} wall {' / '.join(f'{v:.3f}' for v in spread(ratios(collections, top, bottom, 'wall')))}, "
                f"CPU {' / '.join(f'{v:.3f}' for v in spread(ratios(collections, top, bottom, 'cpu')))}"
                for top, bottom in further
            )
            + ".",
        ]
    without = [
        f"{top} / {bottom} {' / '.join(f'{v:.3f}' for v in spread(ratios(collections, top, bottom, 'gym')))}"
        for top, bottom in _pairs(collections)
    ]
    if without:
        lines += [
            "",
            "CPU of all processes but the receiver (it stands for your tracing backend, which runs elsewhere), "
            "min / median / max: " + "; ".join(without) + ".",
        ]
    goals = (
        goal_line(collections),
        goal_line(collections, "gym", "hand", HAND_GOAL),
        goal_line(collections, "gym", "none", GYM_GOAL),
    )
    for goal in goals:
        if goal:
            lines += ["", *goal]
    beside = tracing_line(collections)
    if beside:
        lines += ["", beside]
    by_block = block_lines(collections)
    if by_block:
        lines += ["", *by_block]
    speed = speed_lines(collections)
    if speed:
        lines += ["", *speed]
    lines += ["", *cpu_table(collections), ""]
    parts = parts_lines(collections)
    if parts:
        lines += [*parts, ""]
    pauses = gc_lines(collections)
    if pauses:
        lines += [*pauses, ""]
    lines += [*span_table(collections, spans), ""]
    if same:
        lines += [*same, ""]
    kept = lean_spans_lines(collections, spans)
    if kept:
        lines += [*kept, ""]
    lines += [*share_lines(collections, spans, price), ""]
    lines += outcome_lines(collections)
    if profiles:
        lines += ["", *profile_lines(profiles)]
    return "\n".join(lines).rstrip() + "\n"


PACKAGE_SPANS = "gym."  # the package's span names start so


def _pairs(collections: list[Collection]) -> list[tuple[str, str]]:
    """The pairs of RATIOS that this run has rounds of (a run of a subset of the configurations has fewer)."""
    return [(top, bottom) for top, bottom in RATIOS if ratios(collections, top, bottom, "wall")]


def together_heading(text: str) -> str:
    """A --together run's report as the section beside the alone run's: its own heading and command."""
    text = text.replace("## A whole real run", "### Together: a whole real run", 1)
    return text.replace("`make bench-e2e` (", "`make bench-e2e BENCH_E2E_ARGS=--together` (", 1)


def gym_heading(text: str, arguments: str) -> str:
    """A run of the ``gym`` configuration (this package alone) as the section beside the default run's."""
    text = text.replace("## A whole real run: NeMo Gym 0.7.0 end to end", "### This package alone: NeMo Gym 0.7.0 end to end", 1)
    return text.replace("`make bench-e2e` (", f"`make bench-e2e BENCH_E2E_ARGS='{arguments}'` (", 1)


def hand_heading(text: str, arguments: str) -> str:
    """A run of ``none``, ``hand`` and ``gym`` (the package against the same spans by hand) as a section of its own."""
    text = text.replace(
        "## A whole real run: NeMo Gym 0.7.0 end to end",
        "### Against the same spans by hand: NeMo Gym 0.7.0 end to end",
        1,
    )
    return text.replace("`make bench-e2e` (", f"`make bench-e2e BENCH_E2E_ARGS='{arguments}'` (", 1)


def variant_heading(text: str, workload: Workload) -> str:
    """A variant run's report as a section of its own: what full stands for in it, and its command."""
    variant = VARIANTS[workload.variant]  # type: ignore[index]
    arguments = f"--together --{variant.flag}" if workload.together else f"--{variant.flag}"
    text = text.replace("## A whole real run: NeMo Gym 0.7.0 end to end", f"### {variant.heading}", 1)
    return text.replace("`make bench-e2e` (", f"`make bench-e2e BENCH_E2E_ARGS='{arguments}'` (", 1)


def slotting(workload: Workload, configurations: int = 3) -> str:
    """How a round's collections share the machine, for the report (``configurations``: how many ran)."""
    orders = "every order" if configurations % 2 else "the orders of a balanced Latin square"  # round_orders
    if workload.together:
        return (
            "in every round all configurations collect at the same moment (their collectors started a few "
            f"milliseconds apart, in an order that takes {orders} in turn), sharing the machine's CPUs: every "
            "figure is higher than alone, and the machine's changing speed slows them all alike; their processes "
            f"are stopped (SIGSTOP) between rounds and resumed {THAW_SECONDS:g} s before them"
        )
    return (
        f"its processes stopped (SIGSTOP) while another collects and resumed {THAW_SECONDS:g} s before its own "
        f"collections; the rounds take {orders} of the configurations in turn (each runs in every position, and "
        "directly after each other, equally often)"
    )


def block_lines(collections: list[Collection]) -> list[str]:
    """The compared pair (full / contrib, gym / hand, gym / none) per block of rounds: a difference between blocks
    is one of the servers' instances (where their memory and threads landed), which starting them afresh for each
    block averages out."""
    blocks = sorted({c.block for c in collections})
    if len(blocks) < 2:
        return []
    top, bottom = compared(collections)
    parts = []
    for block in blocks:
        mine = [c for c in collections if c.block == block]
        walls, cpus = ratios(mine, top, bottom, "wall"), ratios(mine, top, bottom, "cpu")
        if walls:
            rounds = sorted({c.round for c in mine})
            parts.append(
                f"block {block} (rounds {rounds[0]} to {rounds[-1]}): wall {statistics.median(walls):.3f}, "
                f"CPU {statistics.median(cpus):.3f}"
            )
    if not parts:
        return []
    lead = f"**By block** (every configuration started afresh for each), {top} / {bottom}, median of its rounds: "
    return [lead + "; ".join(parts) + "."]


def _present(collections: list[Collection]) -> list[str]:
    """The configurations this run collected, in CONFIGURATIONS' order."""
    return [n for n in CONFIGURATIONS if any(c.configuration == n for c in collections)]


def cpu_table(collections: list[Collection]) -> list[str]:
    groups = sorted({group for c in collections for group in c.cpu})
    names = _present(collections)
    pairs = difference_pairs(collections)
    lines = [
        "CPU per process group, median over rounds (ms per rollout):",
        "",
        "| process group | " + " | ".join(names) + "".join(f" | {top} - {bottom}" for top, bottom in pairs) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---:" * len(pairs) + " |",
    ]
    for group in [*groups, "all"]:
        cells = {}
        for name in names:
            mine = [c for c in collections if c.configuration == name]
            if mine:
                values = [(c.cpu_total if group == "all" else c.cpu.get(group, 0.0)) * 1000 / c.rollouts for c in mine]
                cells[name] = statistics.median(values)
        differences = [f"{cells[top] - cells[bottom]:+.2f}" if top in cells and bottom in cells else "" for top, bottom in pairs]
        label = "**all**" if group == "all" else group
        lines.append(f"| {label} | " + " | ".join([*(f"{cells.get(n, 0.0):.2f}" for n in names), *differences]) + " |")
    return lines


def parts_lines(collections: list[Collection]) -> list[str]:
    """gym / hand by process group: where the package's CPU goes beside the same spans written by hand, each
    group's difference and ratio taken within a round (the median of the rounds' own, with its interval)."""
    top, bottom = compared(collections)
    pairs = round_pairs(collections, top, bottom)
    if (top, bottom) != ("gym", "hand") or not pairs:
        return []
    groups = sorted({group for c in collections if c.configuration in (top, bottom) for group in c.cpu})
    lines = [
        f"**The parts**, {top} against {bottom} by process group, within each round (ms of CPU per rollout; the median "
        "of the rounds' own difference and ratio, 95% bootstrap interval of the median):",
        "",
        f"| process group | {bottom} | {top} | {top} - {bottom} | interval | {top} / {bottom} | interval |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for group in [*groups, None]:

        def ms(c: Collection, g: str | None = group) -> float:
            return (c.cpu_total if g is None else c.cpu.get(g, 0.0)) * 1000 / c.rollouts

        differences = [ms(mine) - ms(theirs) for mine, theirs in pairs]
        shares = [ms(mine) / ms(theirs) for mine, theirs in pairs if ms(theirs) > 0]
        low, high = median_interval(differences)
        ratio, interval = "", ""
        if len(shares) == len(pairs):
            ratio = f"{statistics.median(shares):.3f}"
            interval = "{:.3f} to {:.3f}".format(*median_interval(shares))
        label = "**all**" if group is None else group
        lines.append(
            f"| {label} | {statistics.median(ms(t) for _, t in pairs):.2f} | {statistics.median(ms(m) for m, _ in pairs):.2f} | "
            f"{statistics.median(differences):+.2f} | {low:+.2f} to {high:+.2f} | {ratio} | {interval} |"
        )
    return lines


def gc_lines(collections: list[Collection]) -> list[str]:
    """The garbage collector's pauses per group and configuration, and full's share outside them."""
    if not any(c.gc for c in collections):
        return []
    names = [n for n in CONFIGURATIONS if any(c.configuration == n for c in collections)]
    groups = sorted({group for c in collections for group in c.gc})
    top, bottom = compared(collections)
    pairs = difference_pairs(collections)
    lines = [
        "The garbage collector's pauses (`benchmarks/gc_hook.py`: `gc.callbacks` in every process of every configuration, "
        "the CPU time of the thread that collects), median over rounds: full (generation 2) collections per collection; "
        "CPU in pauses of every generation, ms per rollout. They are inside the CPU figures above:",
        "",
        "| process group | " + " | ".join(names) + "".join(f" | {a} - {b}" for a, b in pairs) + " |",
        "| --- | " + " | ".join("---:" for _ in names) + " | ---:" * len(pairs) + " |",
    ]
    for group in [*groups, None]:
        cells: dict[str, tuple[float, float]] = {}
        for name in names:
            mine = [c for c in collections if c.configuration == name]
            count = statistics.median(gc_total(c, group)[0] for c in mine)
            ms = statistics.median(gc_total(c, group)[1] * 1000 / c.rollouts for c in mine)
            cells[name] = (count, ms)
        differences = [f"{cells[a][1] - cells[b][1]:+.2f}" if a in cells and b in cells else "" for a, b in pairs]
        label = "**all**" if group is None else group
        lines.append(f"| {label} | " + " | ".join([*(f"{cells[n][0]:g}; {cells[n][1]:.2f}" for n in names), *differences]) + " |")
    pairs = round_pairs(collections, top, bottom)
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
            f"Within a round, {top} - {bottom} per rollout: in the pauses {statistics.median(in_pauses):+.2f} ms (min / median / "
            "max " + " / ".join(f"{v:+.2f}" for v in spread(in_pauses)) + "), outside them "
            f"{statistics.median(outside):+.2f} ms (95% interval of the median {low:+.2f} to {high:+.2f}; "
            f"{statistics.median(outside) / contrib_outside:.1%} of {bottom}'s {contrib_outside:.2f} ms outside its pauses). "
            f"{top} ran more full collections than {bottom} in {full_more} of {len(pairs)} rounds, fewer in {full_fewer}.",
        ]
    return lines


def span_table(collections: list[Collection], spans: dict[str, Counter[str]]) -> list[str]:
    rollouts = {name: sum(c.rollouts for c in collections if c.configuration == name) for name in CONFIGURATIONS}
    names = sorted({span for counts in spans.values() for span in counts})
    traced = [n for n in _present(collections) if n != "none"]
    lines = [
        "Spans per rollout by name (all timed rounds):",
        "",
        "| span | " + " | ".join(traced) + " |",
        "| --- | " + " | ".join("---:" for _ in traced) + " |",
    ]
    for span in names:
        cells = [f"{spans.get(n, Counter())[span] / max(rollouts[n], 1):.2f}" for n in traced]
        lines.append(f"| `{span}` | " + " | ".join(cells) + " |")
    return lines


def lean_spans_lines(collections: list[Collection], spans: dict[str, Counter[str]]) -> list[str]:
    """Whether lean kept the package's spans as full makes them: its `gym.*` spans per rollout beside full's."""
    rollouts = {n: sum(c.rollouts for c in collections if c.configuration == n) for n in ("full", "lean")}
    if not all(rollouts.values()):
        return []

    def ours(name: str) -> dict[str, float]:
        counts = spans.get(name, Counter())
        return {span: count / rollouts[name] for span, count in sorted(counts.items()) if span.startswith(PACKAGE_SPANS)}

    full, lean = ours("full"), ours("lean")
    listed = ", ".join(f"`{span}` {per_rollout:.2f}" for span, per_rollout in full.items())
    differ = [
        f"`{span}` full {full.get(span, 0.0):.2f}, lean {lean.get(span, 0.0):.2f}"
        for span in sorted(set(full) | set(lean))
        if abs(full.get(span, 0.0) - lean.get(span, 0.0)) > 1e-9
    ]
    if differ:
        return ["**lean's spans of the package differ from full's** (per rollout): " + "; ".join(differ) + "."]
    return [f"lean kept the package's spans as full makes them, per rollout: {listed}."]


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

    if not all(any(c.configuration == n for c in collections) for n in ("none", "contrib", "full")):
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
            "(`gym_harness/bench/span_price.py`: full's first timed round made again with the SDK, no instrumentation running, "
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
