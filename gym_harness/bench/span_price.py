"""What OpenTelemetry itself charges for what SPEC requires of a rollout, measured alone (issue 14).

    python -m gym_harness.bench.span_price --spans RECEIVED.jsonl --start 0 --end -1 --rollouts 400 --seconds 8.2

(from the checkout's root.) ``benchmarks/whole_run.py`` runs this in the e2e venv after its rounds, on the spans the ``full``
configuration's receiver got in its first timed round. Two prices, printed as one JSON object:

- **The package's spans**: every span of that round is made again with the OpenTelemetry SDK
  (its name, kind and attributes as received; no instrumentation runs), through a
  ``BatchSpanProcessor`` and the OTLP/HTTP exporter, to a fresh ``oteltap`` receiver, paced over
  the collection's wall time. Side by side, rotating which goes first: the contrib spans alone, and
  the contrib spans with the package's (``gym.*``). The difference in CPU, of this process (every
  thread: the span processor's export included) and of the receiver, per rollout, is the price of
  making, exporting and receiving the package's spans among the others, with nothing of the
  package running. One process replays what several processes sent, so export requests carry
  larger batches than in the run: the price of a request is shared by more spans here.
- **The baggage entry**: the propagator that ``OTEL_PROPAGATORS`` configures (W3C trace context
  and baggage by default) injecting into a request's headers and extracting from them, with the
  ``nemo.gym.rollout.id`` entry in the context and without it; the difference, times the
  requests per rollout (the CLIENT spans of the round), is what carrying the rollout id on every
  hop costs the propagator.

Both are lower bounds of what those parts cost inside a run, where caches and the garbage
collector share the process with everything else.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gym_harness.otlp_json import Span, span_objects, wait_quiet
from gym_harness.processes import exited, free_port, parse_stat, port_open, wait_for

PACKAGE_PREFIX = "gym."
BAGGAGE_KEY = "nemo.gym.rollout.id"


def read_spans(path: Path, start: int, end: int) -> list[Span]:
    """The spans the receiver printed between two byte offsets (``end`` -1: to the end), in order."""
    return [Span.from_json(obj) for obj in span_objects(path, start, None if end < 0 else end)]


def is_package_span(span: Span) -> bool:
    return span.name.startswith(PACKAGE_PREFIX)


def slots(spans: Sequence[Span], count: int) -> list[list[Span]]:
    """``spans`` in their order, cut into ``count`` consecutive slots of about equal size."""
    count = max(count, 1)
    return [list(spans[len(spans) * k // count : len(spans) * (k + 1) // count]) for k in range(count)]


class Receiver:
    """An ``oteltap`` process on 127.0.0.1, its output in a file."""

    def __init__(self, command: str, folder: Path, settle: float) -> None:
        self.settle = settle  # its output unchanged this long: what was sent is in
        self.port = free_port()
        self.output = folder / "received.jsonl"
        with self.output.open("wb") as out:
            self.process = subprocess.Popen([command, "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT)
        wait_for("the OTLP receiver", lambda: port_open(self.port), 30, exited(self.process, "oteltap", self.output), 0.1)

    def cpu(self) -> float:
        wait_quiet(self.output, self.settle)
        own, _, _ = parse_stat(Path(f"/proc/{self.process.pid}/stat").read_text())
        return own / os.sysconf("SC_CLK_TCK")

    def spans(self) -> int:
        """How many spans it has printed."""
        with self.output.open("rb") as lines:
            return sum(1 for line in lines if b'"spanId"' in line)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def replay(paced: Sequence[Sequence[Span]], seconds: float, endpoint: str) -> float:
    """Make every span again through a fresh SDK pipeline to ``endpoint``, one slot after another
    over ``seconds``; this process's CPU seconds from the provider's start to its shutdown."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    kinds = {kind.name: kind for kind in SpanKind}
    started = time.process_time()
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")))
    tracer = provider.get_tracer("span_price")
    step = seconds / max(len(paced), 1)
    clock = time.monotonic()
    for number, slot in enumerate(paced):
        for span in slot:
            tracer.start_span(span.name, kind=kinds.get(span.kind, SpanKind.INTERNAL), attributes=span.attributes).end()
        pause = clock + (number + 1) * step - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    provider.shutdown()
    return time.process_time() - started


def with_package_spans_repeated(spans: Sequence[Span], times: int) -> list[Span]:
    """``spans`` with each of the package's made ``times`` times in its place."""
    return [copy for span in spans for copy in ([span] * times if is_package_span(span) else [span])]


def price_of_spans(
    spans: Sequence[Span], rollouts: int, seconds: float, rounds: int, receiver: Receiver, times: int
) -> dict[str, Any]:
    """CPU per rollout of the package's spans among the others, this process and the receiver:
    (with each of them made ``times`` times - without) / ``times``, so that the difference stands
    out of the run-to-run noise of everything else."""
    endpoint = f"http://127.0.0.1:{receiver.port}"
    variants: dict[str, list[list[Span]]] = {
        "without": slots([s for s in spans if not is_package_span(s)], rollouts),
        "with": slots(with_package_spans_repeated(spans, times), rollouts),
    }
    figures: dict[str, dict[str, list[float]]] = {name: {"sender": [], "receiver": []} for name in variants}
    names = list(variants)
    for number in range(rounds):
        for name in names[number % 2 :] + names[: number % 2]:
            before = receiver.cpu()
            sender = replay(variants[name], seconds, endpoint)
            figures[name]["sender"].append(sender)
            figures[name]["receiver"].append(receiver.cpu() - before)
    per_rollout: dict[str, list[float]] = {}
    for part in ("sender", "receiver"):
        per_rollout[part] = [
            (with_ - without) * 1000 / rollouts / times
            for with_, without in zip(figures["with"][part], figures["without"][part], strict=True)
        ]
    per_rollout["total"] = [s + r for s, r in zip(per_rollout["sender"], per_rollout["receiver"], strict=True)]
    return {
        "ms_per_rollout": {part: statistics.median(values) for part, values in per_rollout.items()},
        "made": rounds * sum(len(slot) for variant in variants.values() for slot in variant),
        "received": receiver.spans(),
        "rounds_total_ms": per_rollout["total"],
        "times": times,
    }


def per_call_us(call: Callable[[], Any], calls: int) -> float:
    started = time.thread_time()
    for _ in range(calls):
        call()
    return (time.thread_time() - started) / calls * 1e6


def price_of_baggage(rollout_id: str, calls: int, rounds: int) -> dict[str, Any]:
    """One request's inject and extract by the configured propagator, with the baggage entry and
    without: microseconds per hop of each, and the difference."""
    from opentelemetry import baggage, trace
    from opentelemetry.propagate import get_global_textmap
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    propagator = get_global_textmap()
    span = NonRecordingSpan(SpanContext(0x1F2E3D4C5B6A79881F2E3D4C5B6A7988, 0x1A2B3C4D5E6F7081, False, TraceFlags(1)))
    plain = trace.set_span_in_context(span)
    carrying = baggage.set_baggage(BAGGAGE_KEY, rollout_id, plain)

    def hop(ctx: Any) -> Callable[[], Any]:
        """One request: the headers injected from ``ctx``, extracted on the other side."""
        return lambda: propagator.extract(_injected(propagator, ctx))

    hops = {"without": hop(plain), "with": hop(carrying)}
    carried = {name: baggage.get_baggage(BAGGAGE_KEY, one()) for name, one in hops.items()}
    if carried != {"without": None, "with": rollout_id}:
        raise RuntimeError(f"the configured propagator does not carry baggage as expected ({carried}): nothing to price")

    figures: dict[str, list[float]] = {"without": [], "with": []}
    for number in range(rounds):
        order = list(hops)
        for name in order[number % 2 :] + order[: number % 2]:
            figures[name].append(per_call_us(hops[name], calls))
    deltas = [w - p for w, p in zip(figures["with"], figures["without"], strict=True)]
    return {
        "us_per_hop_without": statistics.median(figures["without"]),
        "us_per_hop_with": statistics.median(figures["with"]),
        "us_per_hop": statistics.median(deltas),
        "propagators": type(propagator).__name__
        + "("
        + ", ".join(type(p).__name__ for p in getattr(propagator, "_propagators", []))
        + ")",
    }


def _injected(propagator: Any, ctx: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagator.inject(carrier, ctx)
    return carrier


def measure(options: argparse.Namespace) -> dict[str, Any]:
    spans = read_spans(options.spans, options.start, options.end)
    ours = [s for s in spans if is_package_span(s)]
    if not ours:
        raise RuntimeError(f"no {PACKAGE_PREFIX}* span between those offsets of {options.spans}")
    rollouts = options.rollouts
    rollout_ids = [s.attributes.get(BAGGAGE_KEY) for s in ours]
    rollout_id = next((r for r in rollout_ids if isinstance(r, str)), "0-0")
    hops = sum(1 for s in spans if s.kind == "CLIENT") / rollouts
    with tempfile.TemporaryDirectory(prefix="span-price-") as folder:
        receiver = Receiver(options.receiver, Path(folder), options.settle)
        try:
            spans_price = price_of_spans(spans, rollouts, options.seconds, options.rounds, receiver, options.times)
        finally:
            receiver.stop()
    if spans_price["received"] < spans_price["made"]:
        raise RuntimeError(
            f"the replay lost spans: {spans_price['made']} made, {spans_price['received']} received (the price would be too low)"
        )
    baggage_price = price_of_baggage(rollout_id, options.calls, options.rounds * 3)
    baggage_price["hops_per_rollout"] = hops
    baggage_price["ms_per_rollout"] = baggage_price["us_per_hop"] * hops / 1000
    return {
        "rollouts": rollouts,
        "package_spans_per_rollout": len(ours) / rollouts,
        "other_spans_per_rollout": (len(spans) - len(ours)) / rollouts,
        "spans": spans_price,
        "baggage": baggage_price,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=Path, required=True, help="the receiver's output (oteltap NDJSON)")
    parser.add_argument("--start", type=int, default=0, help="byte offset where the round's spans begin")
    parser.add_argument("--end", type=int, default=-1, help="byte offset where they end (-1: the end of the file)")
    parser.add_argument("--rollouts", type=int, required=True, help="rollouts those spans belong to")
    parser.add_argument("--seconds", type=float, required=True, help="wall time to spread one replay over")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds (default 3)")
    parser.add_argument("--times", type=int, default=4, help="each of the package's spans made this many times (default 4)")
    parser.add_argument("--calls", type=int, default=20_000, help="propagator hops per variant and round")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds the receiver's output must stay unchanged")
    parser.add_argument(
        "--receiver", default=str(Path(sys.executable).with_name("oteltap")), help="the oteltap command (default: beside python)"
    )
    options = parser.parse_args(argv)
    print(json.dumps(measure(options)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
