"""Benchmarks of issue 4: ``make bench`` runs every case, prints the table and writes RESULTS.md.

    python benchmarks/run.py                  # every case at full size -> benchmarks/RESULTS.md
    python benchmarks/run.py --cases A,B      # some cases
    python benchmarks/run.py --quick --output /tmp/results.md   # tiny sizes: proves it still runs

Figures are ratios or differences measured side by side in one run: per round, the instrumented
code and its baselines run on the same input, rotating which goes first; the table gives the
min / median / max over rounds, and a goal is judged on the median.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import cases  # benchmarks/ is the script's directory, first on sys.path
import sections
from cases import FULL, QUICK, Row

HERE = Path(__file__).resolve().parent

LIBRARIES = ("gym-instrument", "opentelemetry-api", "opentelemetry-sdk", "opentelemetry-instrumentation", "wrapt", "pydantic")

HOW = """\
## How each case is measured

Single-threaded cases (A, B, D and the `bind` rows) are timed in the measuring thread's CPU time
(`time.thread_time`), with the garbage collector off while timing, as in `timeit`: on a shared
machine, time spent descheduled is noise that wall time would add to whichever side happened to be
running. Case C (an event loop plus the export thread, garbage collector on) is judged on the
process's CPU time, every thread included: the pipeline never waits for I/O (the model call is
instant), so on an idle machine its wall time is the same figure, and on a shared one wall time
mostly measures the neighbours. The wall-time ratio is shown beside it.

- **A.** The same rows (NeMo Gym flat rows: an mcqa input line plus `task_id`, `_ng_task_index`,
  `_ng_rollout_index`, `agent_ref`; distinct indices every round) go through the instrumented
  function and through two twins traced by hand inline with the same span, attributes and
  `nemo.gym.rollout.id` baggage entry: *lean* (one `start_span`, one `context.attach` of the span
  and the baggage, error recording by hand, `end()`: the fewest calls into the API) and
  *idiomatic* (`tracer.start_as_current_span`, the API's documented context manager and the shape
  of NeMo Gym's own in-tree tracing, with the baggage attached inside it). The goal is judged
  against the idiomatic twin (the in-tree approach); the lean one is shown as a reference.
  `SimpleSpanProcessor` into a null exporter. Before timing, the run checks that all three
  emit the same span (name, kind, attributes) and the same baggage. Async methods are driven
  without an event loop (the same driver for every side). An ended dispatch is remembered for its
  health verdict only when a health function can be instrumented too (a health target whose
  module exists, or `@health`): the first rows instrument the dispatch alone, so nothing is
  remembered there; the *default configuration* rows repeat them with a health target armed as
  well, which is what a zero-code NeMo Gym user gets (the nemo_gym preset's
  `rollout_health:run_health_checks`, present from NeMo Gym 0.5 on): every dispatch is remembered.
  Those rows add a third twin, the idiomatic one that also keeps each span context in a dict by
  rollout id (fresh each round), as in-tree code must to parent its health spans, and are judged
  against it; the idiomatic twin that keeps nothing is shown as a reference. They also give the
  package an SDK meter provider, as the launcher does (each dispatch is counted; the baselines
  count nothing). `send_row` is named as a user names a function of their own,
  `workload:send_row=dispatch@nemo_gym` (the `OTEL_PYTHON_GYM_TARGETS` form), and its result carries
  no token totals, so the dispatch's end reads nothing there. One more row of the dispatch alone
  returns a result that does carry them (`response.usage`, `ng_trajectory.model_calls`): the span
  gets three attributes more, which its twins read by hand from the result they know the shape of,
  so that row shows what reading the totals costs. The `parts` rows give the end-time reads alone,
  of a result with and without them.
- **B.** What a wrapped call costs over the bare call (the original function object), against
  what wrapt's own pass-through `FunctionWrapper` (placed as ours is: around the function, or on
  the class) costs over it, measured side by side in the same rounds: the ratio of the two
  overheads, per round. Judged with tracing off (no SDK at all: the API's proxy provider), shown
  with the SDK on under `suppress_instrumentation`. The extra row is a call the target's condition
  excludes (`ServerClient.post` to a path other than `/run`, the bulk of NeMo Gym's internal
  POSTs), over the bare call.
- **C.** `asyncio.gather` of all dispatches on one loop; each dispatch awaits an (instant) model
  call and a verify on a resources-server subclass (reached through its base-class target, rollout
  id from baggage), against the same pipeline with both spans written inline, lean and idiomatic.
  `BatchSpanProcessor` with a queue that holds the round, so no span is dropped; the time runs
  until `force_flush()` returns, and each round asserts that every span was exported.
- **D.** Per round, the rows are dispatched (instrumented side) and the same number of dispatch
  spans are made by hand (baseline), untimed. Timed: the instrumented health function returning
  one `HealthCheckResult` (pydantic models shaped like NeMo Gym's `RolloutDigest` and `Finding`)
  with every verdict, vs the bare function plus a loop that pops each verdict's parent span
  context from a dict and starts and ends one span with the same attributes under it. Before the
  rounds, one pass of each side is checked (same attributes, each span under its rollout's
  dispatch); the spans kept for that check are released before timing (held, 300,000 exported
  spans made every round slower, the instrumented side more: 1.14 instead of 1.08 in one run).
- **E.** Real instrumented dispatches with `SimpleSpanProcessor` into a null exporter; `tracemalloc`
  runs from before the first dispatch to after the last (and a `gc.collect()`), so the figure is
  every byte still allocated anywhere in the process. First row: divided by the entries
  remembered, as the run holds them (columns: nothing has read the memory yet); beside it, the
  same once a read has built the lookup index (the first lookup of a health pass), which lasts
  until verdicts have found their dispatches. Second row: a capacity of 1,000, measured after
  10,000 and after 100,000 dispatches (at capacity the index is always built); the oldest entries
  are let go and the total does not grow.
- **parts.** The pieces of an instrumented call one at a time, each beside the 5% of an inline
  span that goal A leaves for everything the instrumentation adds: wrapt's dispatch through a
  wrapper that only passes the call on, the row's identity against the inline attribute code,
  the verify request searched for its own rollout id, remembering a dispatch for its verdict
  (alone, and inside a traced run with a health target: memory on minus `remember` a no-op), and
  counting a dispatch under an SDK meter provider: `next()` on the package's tally (an
  observable counter reads it) beside a synchronous `Counter.add`.
- **F.** A fresh interpreter per round (`benchmarks/startup_probe.py`) imports the SDK, then
  `gym_instrument`, then times `GymInstrumentor().instrument(tracer_provider=...)` with the default
  preset (nemo_gym) armed and no `OTEL_*` variables, and lists the modules it imported. The
  package's bytecode is compiled first, as a wheel install has it.
- **links.** The A dispatch inside a run whose output is known (its dispatches persist their links
  beside it, the default) against the same dispatch with persisted links off, alternating per
  round in one instrumentation; the writer thread formats and writes the lines off the dispatch's
  path (its time is the process's, not the dispatch's). Then a health pass in another process:
  `LinkFiles.lookup` of every rollout of a run from the links its collector persisted (bare index
  names, as NeMo Gym's digests give them), in wall time, and its peak Python memory (`tracemalloc`,
  in a second pass).
- **after.** Rollouts generated first (`send_row`, NeMo Gym's rows), then scored. Finding an ended
  dispatch: a memory of that many ended dispatches, indexed, each found once by the code a verify
  after its dispatch runs per call (`role.verify.dispatch_parent`, the span context made the parent
  of the current context) against a health pass's (`take_many` of every name, a parent each), in
  three times D's rounds (one round's pair moves by up to a fifth on this machine).
  Then whole spans per rollout, side by side on fresh dispatches of their own: a reward function
  scoring the batch in one call (`batch`, per item), a verify called once per rollout whose start
  rules name it (per call), a health pass over as many verdicts (per verdict), and the per-call
  verify called where its rollout is in context (no lookup).
- **hops.** The package's own propagation, per request, inside a span with a rollout id in
  baggage: an `inject` target at a request function of NeMo Gym's shape (`request(method, url,
  headers=...)`, the W3C trace context and baggage into a copy of its headers) and a `receive`
  target at a request cycle of uvicorn's shape (`run_asgi(app)`, the request's headers extracted
  into an empty context), each against the same function bare, side by side per round. The ratio
  is a bare HTTP request with that time added, over the bare request: the median of aiohttp POSTs
  with a small JSON body to an aiohttp server on 127.0.0.1 (a NeMo Gym hop, through FastAPI and
  pydantic, takes longer: the share is an upper bound).
"""

WHY_NOT_BIND = """\
## Why the row is found with `ArgLocator`, not `inspect.signature().bind()` per call

Some instrumentations bind every call to the wrapped function's signature to find an argument
by name. `ArgLocator` (`gym_instrument/targets.py`) reads the signature once, when wrapping, and
keeps the row's position; per call it is one keyword lookup and one tuple index. The `bind` rows
above show the difference per call: binding costs {cached} us more per call even with the
signature cached, and {uncached} us more when `inspect.signature()` is called each time (median,
`ServerClient.post` shape) — that is {share_cached:.0%} and {share_uncached:.0%} of the whole
instrumented dispatch of case A ({dispatch_us} us), against the 5% the goal allows for
everything. Binding also raises on a call that does not fit the signature (the wrapped function
would raise its own error) and builds a dict of every argument that is then thrown away; the
locator does neither. Extractors that want every argument by name can still ask for
`call.arguments`, which binds lazily, so only they pay for it.
"""


def machine() -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    versions = []
    for name in LIBRARIES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    commit = sections.code_version(HERE.parent)
    try:
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        load = "unknown"
    return [
        f"- Machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()} ({platform.machine()}); "
        f"load average at start {load}",
        f"- Python: {platform.python_implementation()} {platform.python_version()}",
        f"- Libraries: {', '.join(versions)}",
        f"- Code: git {commit}",
    ]


def figure(value: float, unit: str) -> str:
    if unit == "ratio":
        return f"{value:.3f}"
    if unit in ("us/call over bare", "us/call saved"):
        return f"{value:+.3f}"
    if unit == "us/call":
        return f"{value:.2f}"
    if unit == "% growth":
        return f"{value:+.2f}"
    if unit == "modules":
        return f"{value:.0f}"
    return f"{value:,.1f}" if unit != "ms" else f"{value:.2f}"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| case | what is measured | instrumented (median) | baseline (median) | unit | min | median | max | goal | met |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        met = "—" if row.met is None else ("yes" if row.met else "**NO**")
        lines.append(
            f"| {row.case} | {row.measured} | {row.instrumented} | {row.baseline} | {row.unit} | "
            f"{figure(row.low, row.unit)} | {figure(row.median, row.unit)} | {figure(row.high, row.unit)} | {row.goal} | {met} |"
        )
    return lines


def why_not_bind(rows: list[Row]) -> str:
    dispatch = next((row for row in rows if row.case == "A"), None)
    cached = next((row for row in rows if row.case == "bind" and "post" in row.measured and "cached" in row.baseline), None)
    uncached = next((row for row in rows if row.case == "bind" and "post" in row.measured and "cached" not in row.baseline), None)
    if not (dispatch and cached and uncached):
        return ""
    dispatch_us = float(dispatch.instrumented.rpartition(": ")[2].split()[0].replace(",", ""))
    return WHY_NOT_BIND.format(
        cached=f"{cached.median:.2f}",
        uncached=f"{uncached.median:.2f}",
        share_cached=cached.median / dispatch_us,
        share_uncached=uncached.median / dispatch_us,
        dispatch_us=f"{dispatch_us:.2f}",
    )


def unmet(rows: list[Row]) -> str:
    """What the unmet goals are made of, from the parts measured in the same run (empty when all are met)."""
    failed = [row for row in rows if row.met is False]
    if not failed:
        return ""

    def us(text: str) -> float:
        return float(text.rpartition(": ")[2].split()[0].replace(",", ""))

    def part(marker: str) -> Row | None:
        return next((row for row in rows if row.case == "parts" and marker in row.measured), None)

    wrapt_sync, wrapt_async = part("pass-through wrapper: `send_row(row)`"), part("pass-through wrapper: async")
    around, remember = part("a coroutine around the call's"), part("DispatchLinks.remember")
    remember_in_sync_run, remember_in_async_run = (
        part("remembering inside a run: traced `send_row"),
        part("remembering inside a run: traced async"),
    )
    paragraphs = ["## Goals not met", ""]
    for row in failed:
        if row.case == "A":
            auto, base = us(row.instrumented), us(row.baseline)
            is_async = "async" in row.measured
            # (the name of a part, its cost per call) of the parts no wrapper of this kind can do without
            needed: list[tuple[str, float]] = []
            wrapt_function = wrapt_async if is_async else wrapt_sync
            if wrapt_function is not None:
                needed.append(("wrapt's dispatch through a wrapper that does nothing", wrapt_function.median))
            if is_async and around is not None:
                needed.append(("the coroutine the wrapper runs around the call's, to see it end", around.median))
            pieces = [f"{name} ({cost:.2f} us)" for name, cost in needed]
            if remember is not None and "default configuration" in row.measured:
                remember_in_run = remember_in_async_run if is_async else remember_in_sync_run
                inside = "more inside a run"
                if remember_in_run is not None:
                    inside = f"{remember_in_run.median:.2f} us inside a run of this dispatch"
                pieces.append(
                    "remembering the ended dispatch so that its health verdict can find it "
                    f"({remember.median:.2f} us measured alone; {inside})"
                )
                needed.append(("remembering, alone", remember.median))
                alone = next(
                    (
                        other
                        for other in rows
                        if other.case == "A"
                        and other.baseline.split(":")[0] == row.baseline.split(":")[0]
                        and row.measured.startswith(other.measured + ", default configuration")
                    ),
                    None,
                )
                if alone is not None:
                    pieces.append(
                        f"this dispatch takes {auto - us(alone.instrumented):.2f} us more in the default configuration "
                        "than without a health target armed (the row above it)"
                    )
            allowed = 0.05 * base
            floor = sum(cost for _, cost in needed)
            paragraphs.append(
                f"- **A, {row.measured.split(': ', 1)[1]}**: {auto:.2f} us against {base:.2f} us inline; the goal allows "
                f"{allowed:.2f} us more, the instrumented dispatch takes {auto - base:.2f} us more. Of that, "
                + "; ".join(pieces)
                + " (`parts`). The baselines remember nothing for health; the rest is the package's own work per "
                "call (the row's identity, the guard against nested same-role calls, the suppression check, ending "
                "the span in one place, the dispatch counter)."
                + (
                    f" Those parts alone take {floor:.2f} us, {'more than' if floor > allowed else 'of'} the "
                    f"{allowed:.2f} us allowed, before any of the package's own work."
                    if len(needed) > 1
                    else ""
                )
            )
        elif row.case == "D":
            auto_ms, base_ms = us(row.instrumented), us(row.baseline)
            paragraphs.append(
                f"- **D**: {auto_ms:,.0f} ms against {base_ms:,.0f} ms. Per verdict the hand-written loop pops its "
                "parent from a dict keyed by the digest's rollout id and reads the digest's fields; the instrumented "
                "side also checks each verdict's identity (ints in range, the bare or attempt-qualified id form), "
                "finds the latest attempt of its (task, rollout) in the bounded memory and rebuilds the parent's span "
                "context from it, and counts the verdict."
            )
        elif row.case == "after":
            verify_us, health_us = us(row.instrumented), us(row.baseline)
            paragraphs.append(
                f"- **after**: {verify_us:.2f} us against {health_us:.2f} us per dispatch found. Both find each "
                "name by the same code (`DispatchLinks.find`): a verify once per call, without the lock once every "
                "dispatch is indexed; a health pass for all its verdicts under one lock, forgetting each it finds. "
                "What a verify does apart from a pass per call: its own call (`dispatch_parent`), the check that "
                "everything is indexed, a context of its own for each parent (a pass fills one maker, "
                "`parents_in`), and its lookup made between the spans of its caller, where a pass makes all of "
                "its lookups together, each reading memory the last one brought into the cache. A verify that "
                "scores a batch (`batch`) looks its items up at once, as a health pass does (its whole span per "
                "item is the next row)."
            )
        else:
            paragraphs.append(f"- **{row.case}**: {row.median:.3f} against {row.goal}.")
    return "\n".join(paragraphs) + "\n"


def report(rows: list[Row], quick: bool, elapsed: float, header: list[str]) -> str:
    judged = [row for row in rows if row.met is not None]
    failed = [row for row in judged if not row.met]
    if quick:
        verdict = "**Quick run (tiny sizes): these figures prove the benchmarks run; they do not judge the goals.**"
    elif failed:
        by_case: dict[str, list[Row]] = {}
        for row in judged:
            by_case.setdefault(row.case, []).append(row)
        unmet_cases = [
            f"{case} ({sum(not row.met for row in case_rows)} of {len(case_rows)})"
            for case, case_rows in by_case.items()
            if any(not row.met for row in case_rows)
        ]
        met_cases = [case for case, case_rows in by_case.items() if all(row.met for row in case_rows)]
        verdict = (
            f"**{len(failed)} of {len(judged)} goals not met:** {', '.join(unmet_cases)}. "
            f"Met: {', '.join(met_cases) or 'none'}. See *Goals not met* below the table."
        )
    else:
        verdict = f"**All {len(judged)} goals met.**"
    notes = [f"- {row.case}: {note}" for row in rows for note in row.notes]
    parts = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`benchmarks/run.py`); issue 4 sets the goals. Each figure is measured side by side "
        "in one run: per round the instrumented code and its baselines run on the same input, rotating which goes "
        "first; min / median / max are over rounds, and a goal is judged on the median.",
        "",
        verdict,
        "",
        *header,
        f"- Run: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s",
        "",
        *table(rows),
        "",
        *(["Notes:", "", *notes, ""] if notes else []),
        unmet(rows),
        HOW,
        why_not_bind(rows),
    ]
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: prove the benchmarks run, judge nothing")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md", help="where to write the results (Markdown)")
    parser.add_argument("--cases", default=",".join(cases.CASES), help=f"comma-separated subset of {','.join(cases.CASES)}")
    options = parser.parse_args(argv)
    chosen = [name.strip() for name in options.cases.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in cases.CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; known: {', '.join(cases.CASES)}")

    sizes = QUICK if options.quick else FULL
    header = machine()
    print("\n".join(header), flush=True)
    started = time.perf_counter()
    rows: list[Row] = []
    for name in chosen:
        case_started = time.perf_counter()
        print(f"case {name} ...", end=" ", flush=True)
        rows.extend(cases.CASES[name](sizes))
        print(f"{time.perf_counter() - case_started:.1f} s", flush=True)
    text = report(rows, options.quick, time.perf_counter() - started, header)
    text = sections.keep(options.output, text)  # report_memory.py's and whole_run.py's sections, as they were
    options.output.write_text(text)
    print()
    print(text)
    print(f"written to {options.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
