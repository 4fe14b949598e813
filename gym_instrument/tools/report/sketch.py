"""Bounded-memory measures the report's figures are made of: a duration sketch (quantiles in log
buckets), per-task durations, round bin edges, and the pass@k estimate."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any


class DurationSketch:
    """Quantiles of positive durations in bounded memory: counts in log buckets of 2 % width."""

    GAMMA = 1.02
    _LOG_GAMMA = math.log(GAMMA)

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.zero = 0
        self.count = 0
        self.total = 0
        self.min: int | None = None
        self.max: int | None = None

    def add(self, nanos: int) -> None:
        self.count += 1
        self.total += nanos
        if self.min is None or nanos < self.min:
            self.min = nanos
        if self.max is None or nanos > self.max:
            self.max = nanos
        if nanos <= 0:
            self.zero += 1
        else:
            self.buckets[math.ceil(math.log(nanos) / self._LOG_GAMMA)] += 1

    def value_of(self, bucket: int) -> float:
        """A bucket's representative duration (within 1 % of every duration in it)."""
        return 2 * self.GAMMA**bucket / (self.GAMMA + 1)

    def quantile(self, q: float) -> float | None:
        """The nearest-rank ``q`` quantile (clamped to the exact min and max)."""
        if self.count == 0 or self.min is None or self.max is None:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = self.zero
        if rank <= seen:
            return 0.0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                return min(max(self.value_of(bucket), self.min), self.max)
        return float(self.max)

    def histogram(self, bins: int = 40) -> list[dict[str, float]]:
        """Counts in ``bins`` log-spaced bins between the min and the max (for a picture)."""
        if not self.buckets or self.min is None or self.max is None:
            return []
        low, high = min(self.buckets), max(self.buckets)
        width = max(1, math.ceil((high - low + 1) / bins))
        merged: Counter[int] = Counter()
        for bucket, count in self.buckets.items():
            merged[(bucket - low) // width] += count
        return [
            {
                "from_ms": self.GAMMA ** (low + index * width - 1) / 1e6,
                "to_ms": self.GAMMA ** (low + (index + 1) * width - 1) / 1e6,
                "count": merged[index],
            }
            for index in range(max(merged) + 1)
        ]

    def linear_histogram(self, bins: int | None = None) -> dict[str, Any]:
        """Counts in ``bins`` equal bins from 0 to the p99 (to the max when it is near): a linear axis.

        Durations past the last edge are counted in ``beyond`` (one long tail would leave every bin but
        the first empty).
        """
        top = self.quantile(0.99)
        if top is None or self.max is None:
            return {"bins": [], "beyond": 0}
        if self.max <= 1.5 * top:
            top = float(self.max)
        if bins is None:  # about two bins per square root of the count: a few for a small run, 30 at most
            bins = max(5, min(30, round(2 * math.sqrt(self.count))))
        width = nice_step(top / bins) if top > 0 else 1.0
        bins = max(1, math.ceil(top / width))
        counts = [0] * bins
        beyond = 0
        counts[0] += self.zero
        for bucket, count in self.buckets.items():
            value = min(self.value_of(bucket), float(self.max))
            index = int(value / width)
            if index < bins:
                counts[index] += count
            elif value <= top * 1.0000001:
                counts[-1] += count
            else:
                beyond += count
        return {
            "bins": [
                {"from_ms": index * width / 1e6, "to_ms": (index + 1) * width / 1e6, "count": count}
                for index, count in enumerate(counts)
            ],
            "beyond": beyond,
        }


class TaskDurations:
    """Each task's dispatch durations in a sketch of its own (p50 / p95 per task): grows with tasks, not rollouts."""

    def __init__(self) -> None:
        self.tasks: dict[str, DurationSketch] = {}

    def add(self, task: str, nanos: int) -> None:
        sketch = self.tasks.get(task)
        if sketch is None:
            sketch = self.tasks[task] = DurationSketch()
        sketch.add(nanos)

    def figures(self, task: str) -> dict[str, float | None]:
        sketch = self.tasks.get(task)
        if sketch is None:
            return {"p50_ms": None, "p95_ms": None}
        p50, p95 = sketch.quantile(0.50), sketch.quantile(0.95)
        return {"p50_ms": None if p50 is None else p50 / 1e6, "p95_ms": None if p95 is None else p95 / 1e6}


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``raw``: round bin edges."""
    if raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0, 10.0):
        if factor * power >= raw:
            return factor * power
    return 10.0 * power


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples with ``c`` successes (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def ks_for(n: int) -> list[int]:
    """The k of pass@k reported for ``n`` samples: powers of two below ``n``, and ``n``."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n] if n >= 1 else []
