"""What a whole real run costs (issue 14): ``make bench-e2e`` runs real NeMo Gym 0.7.0 collections four ways.

From the checkout's root (``-m`` puts it on the path: the harness, ``gym_harness.bench``, is imported by name):

    python3 -m benchmarks.whole_run                 # 100 tasks x 4 repeats, concurrency 64, 16 rounds in 4 blocks
    python3 -m benchmarks.whole_run --quick         # 4 tasks x 2, 1 round: proves the harness runs
    python3 -m benchmarks.whole_run --profile       # yappi in every Gym server for one round per configuration
    python3 -m benchmarks.whole_run --force         # run on a busy machine (the results say so)
    python3 -m benchmarks.whole_run --configurations none,hand,gym --rounds 12 --blocks 3   # the package against hand
    python3 -m benchmarks.whole_run --configurations none,hand,gym --sizes 200,800 --rounds 8 --blocks 2   # N rollouts

This file is the command line and the RESULTS.md sections; the harness does the rest:
``gym_harness.bench.workload`` (the configurations, the workload, the order of the rounds), ``running``
(starting them, timing collections), ``proc`` (CPU from ``/proc``, stopping and resuming a run), ``stats``
(ratios, intervals, the speed fit), ``profile`` and ``render``/``render_profile`` (the report).

The configurations, each with its own receiver, scripted model, Ray cluster (``ray start``
under the configuration's launcher, on ports of its own, given to NeMo Gym as
``ray_head_node_address``) and ``gym env start`` (its own servers), all started before a block's
first round and kept for its rounds, but each running only for its own collections: the others'
processes are stopped (SIGSTOP) meanwhile, so that their idle Ray clusters and servers take no CPU
from it, as on a machine that runs one pipeline. Every block starts them all afresh: where one
instance's memory and threads landed stays with it for as long as it runs, so one block alone
can put a configuration above its twin; over blocks that averages out. The configurations:

- ``none``: plain ``gym``, no launcher;
- ``contrib``: ``opentelemetry-instrument`` with this package disabled
  (``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=gym``): the FastAPI and aiohttp-client spans;
- ``full``: ``opentelemetry-instrument`` with this package's default preset;
- ``gym`` (named with ``--configurations``, e.g. ``--configurations none,gym``): this package alone, the
  contrib aiohttp-client and FastAPI instrumentations disabled (never imported), so that the package's
  own propagation carries the context, and FastAPI's own telemetry off (``OTEL_PYTHON_GYM_SERVER_TELEMETRY=false``);
  Ray's cluster started as lean's;
- ``hand`` (named with ``--configurations``, e.g. ``--configurations none,hand,gym``): gym's launcher and
  settings with this package disabled too, and the spans gym exports (dispatch with its token totals, model
  call, verify, health, the rewarded counter; traceparent and baggage across every hop) written by hand where
  in-tree code would put them, into the installed wheel by a patch module loaded at start
  (``gym_harness/bench/hand/patch.py``, a ``.pth`` armed by ``GYM_BENCH_HAND``); after each block the run
  checks that hand and gym exported the same spans per rollout (names, kinds, attribute keys), and stops when
  they did not; the report judges gym / hand and gives hand / none beside it, and gym - hand by process;
- ``lean``: full with the settings a NeMo Gym user should run with: Ray's cluster started without the
  launcher (``ray start`` in a plain environment, given to Gym as ``+ray_head_node_address``), so that
  Ray's processes carry no OpenTelemetry; the package's spans are the same as full's. FastAPI's
  ``http send``/``http receive`` spans would belong here too, but opentelemetry-instrumentation-fastapi
  0.66b1 has no variable for its ``exclude_spans`` (``gym_harness/bench/workload.py``, LEAN_SETTINGS).

Per configuration and block one untimed warm-up collection, then rounds in which every
configuration collects once, the rounds taking balanced orders of the configurations in turn (each
runs in every position and directly after each other equally often). Per collection: the collector's wall time (start to
exit of ``gym eval run --no-serve``) and the CPU time of every process of the configuration (the
collector from ``wait4``; the servers, Ray's processes, the model and the receiver from
``/proc/<pid>/stat``, utime + stime + reaped children's, after minus before), and the spans the
receiver got per rollout, by name. Ratios are taken within a round (contrib / none, full / contrib, lean / contrib, lean / none)
and the table gives their min / median / max over rounds. Every configuration must write the same
rows with the same rewards per task in the same round (the scripted model's answers depend only on
how often it has seen a prompt); a difference fails the run.

The machine itself changes speed from one collection to the next: on a shared host a virtual CPU
runs the same instructions up to twice as slowly while a neighbour has its core's other
hyperthread, and every process of a collection slows together (an A/A run, contrib given full's
configuration, spread its rounds' ratio by 8% and put one twin 4% above the other over 11 rounds).
``speed_probe.py`` runs beside the whole run, outside every configuration, timing the same small
piece of Python every 50 ms; each collection gets the probe's mean over its window. The report
fits how the collections' wall and CPU follow it (each against its configuration's mean, in logs)
and judges the goal twice: on the raw ratios, and on each round's ratio divided by its two
collections' probe ratio to the fitted power.

The garbage collector is the other lump: a full collection of a server's or the collector's heap
takes a fifth of a second or more here, and one more or fewer inside a collection's window moves its
CPU by a percent. ``gc_hook.py``, installed in the venv for the run (a ``.pth`` start-up hook, inert
without ``GYM_BENCH_GC_DIR``), counts every process's pauses in every configuration alike; the report
gives them per group and the package's share outside them.

``--sizes 200,800`` collects every configuration at each size in every round (back to back, which first
alternating): each round's line through a configuration's sizes gives what a rollout adds (the slope) and what a
collection costs whatever its size (the intercept); the report states them beside the launcher's and this
package's start costs (``gym_harness/bench/launch.py``, measured right after), so that a user can compute a run
of any size. It has a section of its own, as a run of ``hand`` and ``gym`` has.

After the rounds, ``gym_harness/bench/span_price.py`` (in the same venv) prices what SPEC requires of the package
alone: full's first timed round's spans made again with the SDK, with the package's spans and
without, and the baggage entry through the configured propagator; the report sets the package's
share beside that price.

Ray's dashboard polls ``/api/healthz`` through the instrumented aiohttp client under the launcher:
``OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS=/api/healthz`` keeps those spans out, as in ``make e2e``.

The machine must be quiet: before the first round the other processes' CPU is sampled, and the run
refuses when it is above ``--max-busy`` cores (``--force`` runs anyway and marks the results). The
other processes' CPU during every round is measured too and reported.

Reuses ``make e2e``'s venv (``.venv-e2e-070``, built when missing) and scripted model (``gym_harness``);
standard library only, any Python 3.10+. Results: the ``whole_run`` section of benchmarks/RESULTS.md (``make
bench`` keeps it); logs of the last run in ``.e2e-work/bench-e2e/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.sections import (
    WHOLE_RUN,
    WHOLE_RUN_DROP_OURS,
    WHOLE_RUN_GYM,
    WHOLE_RUN_HAND,
    WHOLE_RUN_NO_BAGGAGE,
    WHOLE_RUN_PROFILE,
    WHOLE_RUN_SIZES,
    WHOLE_RUN_TOGETHER,
    Section,
    code_version,
)
from gym_harness.bench import running
from gym_harness.bench.render import gym_heading, hand_heading, together_heading, variant_heading
from gym_harness.bench.render_profile import profile_lines
from gym_harness.bench.workload import CONFIGURATIONS, DEFAULT_CONFIGURATIONS, FULL, QUICK, VARIANTS
from gym_harness.paths import BENCHMARKS, REPO
from gym_harness.processes import log, run_main

VARIANT_SECTIONS = {section.name: section for section in (WHOLE_RUN_NO_BAGGAGE, WHOLE_RUN_DROP_OURS)}


def section_of(finished: running.Finished, profile: bool, arguments: str = "") -> tuple[Section, str]:
    """The RESULTS.md section a run writes, and its body. A profiled run's timings are yappi's: only its
    breakdown goes in, in a section of its own; a variant's, a run at several sizes, a run of the ``hand`` and
    ``gym`` configurations or of ``gym`` alone (their ``arguments`` on the command line, as the section says how
    to run it again) and a --together run's go beside the default's."""
    workload, text = finished.workload, finished.text
    if profile:
        return WHOLE_RUN_PROFILE, "\n".join([*profile_lines(finished.profiles), "", *finished.header])
    if workload.variant is not None:
        return VARIANT_SECTIONS[VARIANTS[workload.variant].section], variant_heading(text, workload)
    if workload.sizes:
        return WHOLE_RUN_SIZES, sizes_heading(text, arguments)
    if "hand" in finished.configurations:
        return WHOLE_RUN_HAND, hand_heading(text, arguments)
    if "gym" in finished.configurations:
        return WHOLE_RUN_GYM, gym_heading(text, arguments)
    if workload.together:
        return WHOLE_RUN_TOGETHER, together_heading(text)
    return WHOLE_RUN, text


def sizes_heading(text: str, arguments: str) -> str:
    """A run at several sizes as its section: a heading under the whole run's, and its command."""
    text = text.replace("## A whole real run at several sizes", "### A whole real run at several sizes", 1)
    return text.replace("`make bench-e2e` (", f"`make bench-e2e BENCH_E2E_ARGS='{arguments}'` (", 1)


def rerun_arguments(options: argparse.Namespace) -> str:
    """The arguments that size and shape this run, as BENCH_E2E_ARGS would give them."""
    arguments = [f"--configurations {','.join(options.configurations)}"]
    if getattr(options, "sizes", None):
        arguments.append(f"--sizes {','.join(str(size) for size in options.sizes)}")
    for name in ("tasks", "repeats", "concurrency", "rounds", "blocks"):
        if getattr(options, name) is not None:
            arguments.append(f"--{name} {getattr(options, name)}")
    return " ".join(arguments)


def run(options: argparse.Namespace) -> int:
    finished = running.run(options, code_version(REPO))
    if finished is None:
        return 2  # refused: the machine is busy
    if options.output is not None:
        section, body = section_of(finished, options.profile, rerun_arguments(options))
        section.write(options.output, body, before=None if section is WHOLE_RUN_PROFILE else WHOLE_RUN_PROFILE)
        log(f"written to {options.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 tasks x 2, concurrency 4, 1 round, no warm-up; judges nothing")
    parser.add_argument("--tasks", type=int, help=f"distinct mcqa tasks (default {FULL.tasks})")
    parser.add_argument("--repeats", type=int, help=f"rollouts per task (default {FULL.repeats})")
    parser.add_argument("--concurrency", type=int, help=f"rollouts in flight (default {FULL.concurrency})")
    parser.add_argument("--rounds", type=int, help=f"timed rounds (default {FULL.rounds})")
    parser.add_argument(
        "--blocks", type=int, help=f"blocks of rounds, each with every configuration started afresh (default {FULL.blocks})"
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="every configuration of a round collects at the same moment: the machine's changing speed hits all alike",
    )
    variants = parser.add_mutually_exclusive_group()
    for variant in VARIANTS.values():
        variants.add_argument(
            f"--{variant.flag}",
            dest="variant",
            action="store_const",
            const=variant.flag,
            help=f"full with {variant.what}; a section of its own in RESULTS.md",
        )
    parser.add_argument(
        "--sizes",
        help="comma-separated rollouts per collection (e.g. 200,800): every round collects each configuration at each; "
        "the report gives what a rollout adds and what a collection costs whatever its size, beside the start costs",
    )
    parser.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=None, help="one untimed collection each first")
    parser.add_argument(
        "--configurations",
        default=",".join(DEFAULT_CONFIGURATIONS),
        help=f"comma-separated subset of {','.join(CONFIGURATIONS)} (default {','.join(DEFAULT_CONFIGURATIONS)})",
    )
    parser.add_argument("--profile", action="store_true", help="yappi in every Gym server for one round; adds the breakdown")
    parser.add_argument("--wait", type=float, default=0, help="seconds to wait for a quiet machine before refusing (default 0)")
    parser.add_argument("--force", action="store_true", help="run even when the machine is busy (the results say so)")
    parser.add_argument(
        "--max-busy", type=float, default=0.25, help="other processes' CPU, in cores, above which the machine is busy"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=BENCHMARKS / "RESULTS.md",
        help="the Markdown file whose whole_run section is written (default benchmarks/RESULTS.md)",
    )
    parser.add_argument(
        "--no-output", dest="output", action="store_const", const=None, help="write only .e2e-work/bench-e2e/RESULTS.md"
    )
    options = parser.parse_args(argv)
    options.configurations = [name.strip() for name in options.configurations.split(",") if name.strip()]
    unknown = set(options.configurations) - set(CONFIGURATIONS)
    if unknown:
        parser.error(f"unknown configuration(s) {sorted(unknown)}")
    if options.sizes is not None:
        repeats = options.repeats or (QUICK if options.quick else FULL).repeats
        try:
            options.sizes = sorted({int(size) for size in options.sizes.split(",") if size.strip()})
        except ValueError:
            parser.error(f"--sizes takes whole numbers of rollouts, comma-separated: {options.sizes!r}")
        if len(options.sizes) < 2 or any(size <= 0 or size % repeats for size in options.sizes):
            parser.error(f"--sizes needs two or more sizes, each a positive multiple of the repeats ({repeats})")
        if options.profile or options.variant is not None:
            parser.error("--sizes runs the configurations as they are: not with --profile or a variant")
    return run_main(lambda: run(options), lambda: running.WORK)


if __name__ == "__main__":
    sys.exit(main())
