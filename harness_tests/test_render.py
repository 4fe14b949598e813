"""The whole run's report (``gym_harness.bench.render``, ``stats``): ratios, the goal and its interval, the
machine's speed, the pauses, the blocks, the package's share, as the Markdown a reader sees."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from gym_harness.bench import launch, profile, render, render_sizes, stats, workload

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_the_report_has_ratios_shares_spans_and_the_profile_breakdown() -> None:
    collections = []
    for number in (1, 2):
        for name, wall, servers in (("none", 5.0, 2.0), ("contrib", 7.0, 4.0), ("full", 7.2 + number / 10, 4.2)):
            cpu = Counter({"collector": 4.0, "server mcqa": servers, "receiver": 0.0 if name == "none" else 1.0})
            outcome = {0: [0.0, 1.0]}
            collections.append(stats.Collection(name, number, 400, wall, cpu, 0.01, outcome, Counter({"healthy": 400})))
    spans = {"contrib": Counter({"POST /run": 800 * 43}), "full": Counter({"POST /run": 800 * 43, "gym.verify": 800 * 3})}
    categories = {category: 1.0 for category, _ in profile.CATEGORIES}
    profiles = [
        profile.Profile("contrib", 400, {"mcqa": 10.0}, dict(categories), {}),
        profile.Profile(
            "full",
            400,
            {"mcqa": 11.0},
            {**categories, "gym_instrument (the package's own code)": 1.5, "propagation (baggage, W3C trace context)": 1.4},
            {"roles.py:open_span -> sdk:start_span": 0.1},
            {"plan.py:wrapper": (0.1, 1.0, 12.0)},
        ),
    ]
    price = {
        "package_spans_per_rollout": 3.0,
        "other_spans_per_rollout": 43.0,
        "spans": {
            "ms_per_rollout": {"total": 0.30, "sender": 0.12, "receiver": 0.18},
            "rounds_total_ms": [0.25, 0.35],
            "times": 4,
        },
        "baggage": {
            "ms_per_rollout": 0.042,
            "hops_per_rollout": 7.0,
            "propagators": "CompositePropagator(W3CBaggagePropagator)",
            "us_per_hop_with": 12.0,
            "us_per_hop_without": 6.0,
        },
    }
    text = render.report(workload.FULL, collections, spans, ["- Machine: test"], False, False, 60.0, profiles, price)
    assert "| full | " in text and "full / contrib" in text and "contrib / none" in text
    assert "; the rounds take every order of the configurations in turn (" in text  # three: every order
    assert "Further ratios" not in text and "| lean |" not in text  # a run without lean reads as before
    assert "1.043 / 1.050 / 1.057" in text  # full / contrib wall, min / median / max of 7.3/7 and 7.4/7
    # the goal, judged on those medians: wall 7.35/7, CPU 9.2/9 in both rounds
    assert "**Goal: full / contrib <= 1.02**, the median of 2 rounds' ratios: wall time 1.050 (**NOT met**;" in text
    assert "CPU of all processes 1.022 (**NOT met**; 95% interval of the median 1.022 to 1.022)" in text
    # full - contrib: (4 + 4.2 + 1) - (4 + 4 + 1) s of CPU over 400 rollouts, in both rounds
    assert "**The package's share**, full - contrib per rollout: 0.50 ms of CPU, the median of the rounds' own" in text
    assert "(95% interval of the median +0.50 to +0.50)" in text
    assert "Within a round it was +0.50 / +0.50 / +0.50 ms" in text
    assert "the package's 3.0 spans per rollout" in text and "0.30 ms per rollout" in text
    assert "on 7.0 requests per rollout" in text and "0.042 ms per rollout" in text
    # the least SPEC's spans and baggage cost, 0.30 + 0.042, and the rest of the 0.50 ms share
    assert "Together 0.34 ms" in text and "+0.16 ms per rollout" in text
    assert "| `gym.verify` | 0.00 | 3.00 |" in text
    assert "**Breakdown of the servers' share**" in text and "`plan.py:wrapper`" in text
    assert "Measured on a busy machine" not in text
    assert "cannot tell" not in text
    # Round 2's full spends 0.3 s less in its server: shares +0.50 and -0.25 ms, an interval that holds the price.
    noisy = [
        dataclasses.replace(c, cpu=c.cpu + Counter({"server mcqa": -0.3})) if (c.configuration, c.round) == ("full", 2) else c
        for c in collections
    ]
    text = render.report(workload.FULL, noisy, spans, ["- Machine: test"], False, False, 60.0, profiles, price)
    assert "(95% interval of the median -0.25 to +0.50)" in text
    assert "That price lies inside the share's interval (-0.25 to +0.50 ms): this run cannot tell" in text
    assert "The rest of the share" not in text


def _rounds(full_walls: list[float], full_cpus: list[float]) -> list[object]:
    collections = []
    for number, (wall, cpu) in enumerate(zip(full_walls, full_cpus, strict=True), start=1):
        for name, seconds, spent in (("contrib", 10.0, 10.0), ("full", wall, cpu)):
            collections.append(stats.Collection(name, number, 400, seconds, Counter({"collector": spent}), 0.0, {}, Counter()))
    return collections


def test_the_goal_is_judged_on_the_median_and_its_interval_narrows_with_rounds() -> None:
    # Wall ratios 0.99 / 1.01 / 1.05: median 1.01, met. CPU ratios 1.00 / 1.03 / 1.04: median 1.03, not met.
    line = render.goal_line(_rounds([9.9, 10.1, 10.5], [10.0, 10.3, 10.4]))[0]
    assert "the median of 3 rounds' ratios: wall time 1.010 (met;" in line
    assert "CPU of all processes 1.030 (**NOT met**;" in line
    # The same spread over more rounds pins the median down more tightly, around it.
    noisy = [1.0, 1.04, 0.99, 1.05, 1.02]
    few, many = stats.median_interval(noisy), stats.median_interval(noisy * 5)
    assert few[0] <= 1.02 <= few[1] and many[0] <= 1.02 <= many[1]
    assert many[1] - many[0] < few[1] - few[0]
    assert stats.median_interval([1.01] * 7) == (1.01, 1.01)


def test_ratios_adjusted_for_the_machine_s_speed() -> None:
    # Each collection's wall and CPU follow the probe with power 0.8; full does 2% more work than contrib.
    speeds = [420.0, 800.0, 610.0, 455.0, 790.0, 500.0, 700.0, 430.0, 650.0, 820.0]
    collections = []
    for number in range(1, 6):
        for offset, (name, work) in enumerate((("contrib", 10.0), ("full", 10.2))):
            speed = speeds[2 * (number - 1) + offset]
            factor = (speed / 600.0) ** 0.8
            cpu = Counter({"collector": 1.5 * work * factor})
            collections.append(stats.Collection(name, number, 400, work * factor, cpu, 0.0, {}, Counter(), speed))
    raw = stats.ratios(collections, "full", "contrib", "cpu")
    assert max(raw) - min(raw) > 0.3  # the machine's speed swamps the 2%
    fit = stats.speed_fit(collections, "cpu")
    assert fit.slope == pytest.approx(0.8) and fit.correlation == pytest.approx(1.0)
    assert fit.collections == 10 and fit.spread == (420.0, 820.0)
    assert stats.ratios(collections, "full", "contrib", "cpu", fit) == pytest.approx([1.02] * 5)
    goal = " ".join(render.goal_line(collections))
    assert "**The same rounds adjusted for the machine's speed** (below): wall time 1.020 (met;" in goal
    assert "CPU of all processes 1.020 (met; 95% interval of the median 1.020 to 1.020)" in goal
    speed = " ".join(render.speed_lines(collections))
    assert "ranged from 420 to 820 us per piece" in speed
    assert "CPU follows the probe with slope 0.80 (correlation 1.00)" in speed and "to 0.000 (CPU)" in speed
    # At the median speed (630 us) contrib spends 15 s * (630/600)^0.8 over 400 rollouts, full 2% more.
    contrib = 15.0 * (630.0 / 600.0) ** 0.8 * 1000 / 400
    assert f"the package's share is +{0.02 * contrib:.2f} ms of CPU per rollout" in speed
    assert f"2.0% of contrib's {contrib:.2f} ms" in speed
    # Without probe samples for every collection there is no fit, and nothing is adjusted.
    collections[0].speed = 0.0
    assert stats.speed_fit(collections, "cpu") is None
    assert len(render.goal_line(collections)) == 1 and render.speed_lines(collections) == []


def test_the_report_puts_the_pauses_beside_the_share_outside_them() -> None:
    # full spends 0.8 s more CPU than contrib per round, 0.6 s of it in one more full collection of its collector.
    collections = []
    for number in (1, 2, 3):
        for name, total, pause, full_collections in (("contrib", 20.0, 0.4, 1), ("full", 20.8, 1.0, 2)):
            pauses = {"collector": {"collections": [300, 30, full_collections], "seconds": [0.05, 0.05, pause - 0.1]}}
            collections.append(
                stats.Collection(name, number, 400, 10.0, Counter({"collector": total}), 0.0, {}, Counter(), 600.0, pauses)
            )
    text = "\n".join(render.gc_lines(collections))
    assert "| collector | 1; 1.00 | 2; 2.50 | +1.50 |" in text  # 0.4 s and 1.0 s over 400 rollouts
    assert "| **all** | 1; 1.00 | 2; 2.50 | +1.50 |" in text
    # (20.8 - 1.0) - (20.0 - 0.4) = 0.2 s outside the pauses: 0.50 ms per rollout, of contrib's 49.00
    assert "in the pauses +1.50 ms" in text and "outside them +0.50 ms" in text and "1.0% of contrib's 49.00 ms" in text
    assert "full ran more full collections than contrib in 3 of 3 rounds, fewer in 0" in text
    assert render.gc_lines([dataclasses.replace(c, gc={}) for c in collections]) == []


def test_the_report_gives_full_over_contrib_per_block() -> None:
    collections = []
    # Block 1's full instance runs 4% above contrib's, block 2's 1% below: a difference of instances.
    for number, block, full_wall in ((1, 1, 10.4), (2, 1, 10.4), (3, 2, 9.9), (4, 2, 9.9)):
        for name, wall in (("contrib", 10.0), ("full", full_wall)):
            collection = stats.Collection(name, number, 400, wall, Counter({"collector": wall}), 0.0, {}, Counter())
            collection.block = block
            collections.append(collection)
    line = render.block_lines(collections)[0]
    assert "block 1 (rounds 1 to 2): wall 1.040, CPU 1.040" in line
    assert "block 2 (rounds 3 to 4): wall 0.990, CPU 0.990" in line
    assert render.block_lines([c for c in collections if c.block == 1]) == []  # one block: nothing to set side by side
    text = render.report(workload.FULL, collections, {}, ["- Machine: test"], False, False, 60.0, [])
    assert "16 round(s) in 4 block(s), every configuration started afresh for each block" in text
    assert "**By block**" in text
    together = render.report(
        dataclasses.replace(workload.FULL, together=True), collections, {}, ["- Machine: test"], False, False, 60.0, []
    )
    assert "in every round all configurations collect at the same moment" in together
    assert "in every round all configurations" not in text


def _four(lean_cpu: float) -> list[stats.Collection]:
    collections = []
    for number in (1, 2):
        for name, wall, cpu in (
            ("none", 5.0, 6.0),
            ("contrib", 7.0, 9.0),
            ("full", 7.2, 9.2),
            ("lean", 6.3 + number / 10, lean_cpu),
        ):
            collections.append(stats.Collection(name, number, 400, wall, Counter({"collector": cpu}), 0.0, {0: [1.0]}, Counter()))
    return collections


def test_the_report_gives_lean_against_contrib_in_its_row_and_against_none_below() -> None:
    spans = {
        "contrib": Counter({"POST /run": 800 * 43}),
        "full": Counter({"POST /run": 800 * 43, "gym.verify": 800, "gym.rollout.dispatch": 800}),
        "lean": Counter({"POST /run": 800 * 43, "gym.verify": 800, "gym.rollout.dispatch": 800}),
    }
    text = render.report(workload.FULL, _four(8.1), spans, ["- Machine: test"], False, False, 60.0, [])
    assert "; the rounds take the orders of a balanced Latin square of the configurations in turn (" in text
    row = next(line for line in text.splitlines() if line.startswith("| lean |"))
    assert "Ray's cluster started without the launcher" in row
    assert "| lean / contrib | 0.914 / 0.921 / 0.929 | 0.900 / 0.900 / 0.900 |" in row  # 6.4/7, 6.5/7; 8.1/9
    assert "lean / none wall 1.280 / 1.290 / 1.300, CPU 1.350 / 1.350 / 1.350" in text  # 6.4/5, 6.5/5; 8.1/6
    assert "| process group | none | contrib | full | lean | full - contrib |" in text
    assert "| `gym.verify` | 0.00 | 1.00 | 1.00 |" in text  # contrib, full, lean
    assert (
        "lean kept the package's spans as full makes them, per rollout: `gym.rollout.dispatch` 1.00, `gym.verify` 1.00." in text
    )


def test_the_report_says_when_lean_lost_some_of_the_package_s_spans() -> None:
    spans = {"full": Counter({"gym.verify": 800, "gym.rollout.health": 800}), "lean": Counter({"gym.verify": 800})}
    lines = render.lean_spans_lines(_four(8.1), spans)
    assert lines == [
        "**lean's spans of the package differ from full's** (per rollout): `gym.rollout.health` full 1.00, lean 0.00."
    ]
    assert render.lean_spans_lines([c for c in _four(8.1) if c.configuration != "lean"], spans) == []  # no lean: no line


def test_a_run_of_none_and_gym_compares_gym_with_none_in_every_table() -> None:
    # 3 rounds; gym's collector spends 0.4 s more than none's and its mcqa server 0.1 s more, each collection's
    # figures following the machine's speed (the median collection of each configuration runs at 415).
    collections = []
    for number, (none_speed, gym_speed) in enumerate(((400.0, 425.0), (430.0, 410.0), (415.0, 415.0)), start=1):
        for name, extra, speed in (("none", 0.0, none_speed), ("gym", 1.0, gym_speed)):
            factor = speed / 415.0
            cpu = Counter({"collector": (4.0 + 0.4 * extra) * factor, "server mcqa": (1.0 + 0.1 * extra) * factor})
            gc = {"collector": {"collections": [10, 2, 1], "seconds": [0.01, 0.01, 0.02 + 0.04 * extra]}}
            wall = (6.0 + extra * 0.3) * factor
            collections.append(stats.Collection(name, number, 400, wall, cpu, 0.0, {}, Counter(), speed, gc))
    table = "\n".join(render.cpu_table(collections))
    assert "| process group | none | gym | gym - none |" in table
    assert "| collector | 10.00 | 11.00 | +1.00 |" in table and "| server mcqa | 2.50 | 2.75 | +0.25 |" in table
    pauses = "\n".join(render.gc_lines(collections))
    assert "| none | gym | gym - none |" in pauses and "| collector | 1; 0.10 | 1; 0.20 | +0.10 |" in pauses
    assert "Within a round, gym - none per rollout: in the pauses +0.10 ms" in pauses
    speed = " ".join(render.speed_lines(collections))
    assert "Dividing each round's gym / none by" in speed and "from - to -" not in speed


def _none_hand_gym() -> list[stats.Collection]:
    """3 rounds: hand's collector spends 0.8 s more than none's, gym's 0.1 s more than hand's in rounds 1 and 3 and
    0.3 s more in round 2; gym's mcqa server 0.04 s more than hand's in every round."""
    collections = []
    for number, gym_extra in ((1, 0.1), (2, 0.3), (3, 0.1)):
        for name, collector, mcqa in (("none", 8.0, 1.0), ("hand", 8.8, 1.2), ("gym", 8.8 + gym_extra, 1.24)):
            cpu = Counter({"collector": collector, "server mcqa": mcqa})
            wall = {"none": 6.0, "hand": 6.3, "gym": 6.3 + gym_extra / 2}[name]
            collections.append(stats.Collection(name, number, 400, wall, cpu, 0.0, {0: [1.0]}, Counter({"healthy": 400})))
    return collections


def test_a_run_of_none_hand_and_gym_judges_gym_against_hand_and_shows_the_parts() -> None:
    collections = _none_hand_gym()
    spans = {name: Counter({"gym.rollout.dispatch": 1200, "chat": 1200}) for name in ("hand", "gym")}
    same = ["**Same spans, checked** (test)"]
    text = render.report(workload.FULL, collections, spans, ["- Machine: test"], False, False, 60.0, [], None, same)
    assert "| hand | gym's spans written by hand into NeMo Gym (`gym_harness/bench/hand/patch.py`)" in text
    assert "`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=aiohttp-client,fastapi,gym`" in text
    assert "| hand / none | 1.050 / 1.050 / 1.050 |" in text  # 6.3 / 6.0
    # gym / hand CPU: 10.14/10.0, 10.34/10.0, 10.14/10.0 -> median 1.014; wall 6.35/6.3, 6.45/6.3
    assert "| gym / hand | 1.008 / 1.008 / 1.024 | 1.014 / 1.014 / 1.034 |" in text
    assert "**Goal: gym / hand <= 1.02**, the median of 3 rounds' ratios: wall time 1.008 (met;" in text
    assert "CPU of all processes 1.014 (met;" in text
    assert "Further ratios within a round, min / median / max: gym / none wall" in text
    assert (
        "**Beside it, hand / none**: the price of tracing itself, the same spans written by hand against no tracing "
        "(OpenTelemetry's launcher, SDK and exporter included), the median of the rounds' ratios: wall time 1.050 "
        "(95% interval of the median 1.050 to 1.050); CPU of all processes 1.111 (95% interval of the median 1.111 to 1.111)."
    ) in text
    assert "| process group | none | hand | gym | gym - hand | hand - none |" in text
    assert "| collector | 20.00 | 22.00 | 22.25 | +0.25 | +2.00 |" in text  # ms per rollout: 8.8 s / 400 etc.
    # The parts: each round's own difference and ratio, the median and its interval.
    assert "**The parts**, gym against hand by process group" in text
    assert "| collector | 22.00 | 22.25 | +0.25 | +0.25 to +0.75 | 1.011 | 1.011 to 1.034 |" in text
    assert "| server mcqa | 3.00 | 3.10 | +0.10 | +0.10 to +0.10 | 1.033 | 1.033 to 1.033 |" in text
    assert "| **all** | 25.00 | 25.35 | +0.35 | +0.35 to +0.85 | 1.014 | 1.014 to 1.034 |" in text
    assert "**Same spans, checked** (test)" in text
    assert "The package's share" not in text  # full - contrib: not in this run


def test_a_run_at_two_sizes_gives_each_rollout_s_cost_and_a_collection_s_apart() -> None:
    # CPU = fixed + rollouts x per rollout, exactly: none 1.0 s + 20 ms, hand 1.4 s + 20.5 ms, gym 1.42 s + 20.6 ms,
    # gym's per rollout 0.1 ms higher still in round 2.
    collections = []
    for number in (1, 2, 3):
        for name, fixed, per_rollout in (("none", 1.0, 0.020), ("hand", 1.4, 0.0205), ("gym", 1.42, 0.0206)):
            per_rollout += 0.0001 if (name, number) == ("gym", 2) else 0.0
            for size in (200, 800):
                cpu = Counter({"collector": fixed + size * per_rollout})
                wall = 2.0 + size * 0.01
                collections.append(stats.Collection(name, number, size, wall, cpu, 0.0, {}, Counter()))
    sized = dataclasses.replace(workload.FULL, tasks=200, sizes=(200, 800))
    costs = launch.StartCosts(
        30, launch.Added(327.0, 325.0, 331.0), launch.Added(23.0, 19.0, 29.0), launch.Added(353.0, 351.0, 355.0)
    )
    text = render_sizes.sizes_report(sized, collections, ["- Machine: test"], False, False, 60.0, costs, ["(same)"])
    assert "collections of 200 (50 tasks x 4) and 800 (200 tasks x 4) mcqa rollouts" in text
    assert "| none | 4.00 s / 10.00 s | 5.00 s / 17.00 s | 20.00 (20.00 to 20.00) ms | 1000 (1000 to 1000) ms |" in text
    assert "| gym - none | +0.600 (+0.600 to +0.700) ms | +420 (+420 to +420) ms | +0.000 (+0.000 to +0.000) ms |" in text
    assert "| hand - none | +0.500 (+0.500 to +0.500) ms | +400 (+400 to +400) ms |" in text
    assert "| gym - hand | +0.100 (+0.100 to +0.200) ms | +20 (+20 to +20) ms |" in text
    assert "OpenTelemetry's launcher adds 327 ms (325 to 331) of CPU to a process's start, this package on it 23 ms" in text
    assert "this package adds about 420 ms + N x 0.600 ms of CPU to an untraced run" in text
    assert "and +20 ms + N x +0.100 ms to a run with the same spans written by hand" in text
    assert "adds 353 ms more for each process it starts under the launcher (23 ms of it this package's)" in text
    # 400 rollouts: gym 1420 + 400 x 20.6 = 9660 ms, none 9000, hand 1400 + 8200 = 9600.
    assert "400 rollouts: gym / none 1.073, gym / hand 1.006;" in text
    assert "1,000,000 rollouts: gym / none 1.030, gym / hand 1.005." in text
    assert "(same)" in text
