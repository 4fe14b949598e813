"""The figures of a run: one collection's measurements, and the ratios, intervals and speed fit taken over rounds."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field

from gym_harness.bench.workload import CONFIGURATIONS

GOAL = 1.02  # issue 14: full / contrib, wall time and CPU of all processes, median over rounds
GYM_GOAL = 1.03  # the package alone (its own propagation, no contrib) against an untraced run: gym / none
HAND_GOAL = 1.02  # issue 46: the package against the same spans written by hand into NeMo Gym: gym / hand

BOOTSTRAP_RESAMPLES = 4000


@dataclass
class Collection:
    configuration: str
    round: int
    rollouts: int
    wall: float
    cpu: Counter[str]  # seconds per group, this configuration's processes
    others: float  # the rest of the machine, in cores, over the collection
    outcomes: dict[int, list[float | None]]
    verdicts: Counter[str]
    speed: float = 0.0  # the speed probe's mean CPU us per piece over the CPU window (0: no samples)
    # The garbage collector's pauses per group over the CPU window: {"collections": [g0, g1, g2], "seconds": [...]}
    gc: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    block: int = 1  # the block of rounds (each with its configurations started afresh) it ran in

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())

    @property
    def cpu_without_receiver(self) -> float:
        """What the user's own machines spend: the receiver stands for their tracing backend."""
        return self.cpu_total - self.cpu.get("receiver", 0.0)


def spread(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """A percentile-bootstrap interval of the median of ``values`` (rounds resampled with replacement,
    a fixed seed: the same rounds give the same interval). It says how far the median of this many
    rounds moves with the round-to-round noise of a shared machine."""
    draw = random.Random(0)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(BOOTSTRAP_RESAMPLES))
    low = medians[int((1 - level) / 2 * BOOTSTRAP_RESAMPLES)]
    high = medians[min(int((1 + level) / 2 * BOOTSTRAP_RESAMPLES), BOOTSTRAP_RESAMPLES - 1)]
    return low, high


@dataclass(frozen=True)
class SpeedFit:
    """How a collection's wall or CPU time follows the speed probe over its window."""

    slope: float  # d log(value) / d log(probe's time per piece)
    correlation: float
    collections: int
    spread: tuple[float, float]  # the probe's lowest and highest collection mean, us per piece


def speed_fit(collections: list[Collection], what: str) -> SpeedFit | None:
    """The least-squares slope of log(value) on log(probe), each collection against its configuration's mean
    of logs (the configurations differ in their work, not in the machine they run on); None without probe
    samples for every collection or with too few collections."""
    if not collections or any(c.speed <= 0 for c in collections):
        return None
    xs: list[float] = []
    ys: list[float] = []
    for name in CONFIGURATIONS:
        mine = [c for c in collections if c.configuration == name]
        if len(mine) < 2:
            continue
        x = [math.log(c.speed) for c in mine]
        y = [math.log(value_of(c, what)) for c in mine]
        xs += [v - statistics.mean(x) for v in x]
        ys += [v - statistics.mean(y) for v in y]
    sxx = sum(v * v for v in xs)
    syy = sum(v * v for v in ys)
    if len(xs) < 4 or sxx <= 0 or syy <= 0:
        return None
    sxy = sum(a * b for a, b in zip(xs, ys, strict=True))
    speeds = [c.speed for c in collections]
    return SpeedFit(sxy / sxx, sxy / math.sqrt(sxx * syy), len(xs), (min(speeds), max(speeds)))


def value_of(collection: Collection, what: str) -> float:
    if what == "wall":
        return collection.wall
    if what == "cpu":
        return collection.cpu_total
    return collection.cpu_without_receiver


def round_pairs(
    collections: list[Collection], numerator: str = "full", denominator: str = "contrib"
) -> list[tuple[Collection, Collection]]:
    """Each round's (numerator's, denominator's) collections, in round order; a round without both is left out."""
    by_round: dict[int, dict[str, Collection]] = {}
    for collection in collections:
        by_round.setdefault(collection.round, {})[collection.configuration] = collection
    return [
        (pair[numerator], pair[denominator]) for _, pair in sorted(by_round.items()) if numerator in pair and denominator in pair
    ]


def ratios(
    collections: list[Collection], numerator: str, denominator: str, what: str, fit: SpeedFit | None = None
) -> list[float]:
    """The rounds' ratios; with ``fit``, each divided by the two collections' probe ratio to the fit's power:
    what the ratio would have been had the machine run at one speed for both."""
    values = []
    for top, bottom in round_pairs(collections, numerator, denominator):
        ratio = value_of(top, what) / value_of(bottom, what)
        if fit is not None:
            ratio /= (top.speed / bottom.speed) ** fit.slope
        values.append(ratio)
    return values


def gc_total(collection: Collection, group: str | None = None) -> tuple[float, float]:
    """(full collections, CPU seconds of all pauses) in a collection: one group's, or every group's."""
    parts = collection.gc.values() if group is None else [collection.gc[group]] if group in collection.gc else []
    return sum(p["collections"][2] for p in parts), sum(sum(p["seconds"]) for p in parts)
