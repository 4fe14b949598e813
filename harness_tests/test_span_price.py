"""``gym_harness.bench.span_price``: the price of the package's spans and baggage, made again for a real receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


# What the receiver printed in a real ``make bench-e2e`` run (full, NeMo Gym 0.7.0): its banner, a metric
# line, and every span of two rollouts' traces.
RECEIVED_FULL = Path(__file__).resolve().parent / "data" / "received_full.ndjson"


def _received_spans() -> list[dict[str, object]]:
    return [json.loads(line) for line in RECEIVED_FULL.read_text().splitlines() if '"spanId"' in line]


def _span_price(arguments: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gym_harness.bench.span_price", *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_span_price_makes_every_span_again_for_a_real_receiver() -> None:
    spans = _received_spans()
    ours = sum(1 for span in spans if str(span["name"]).startswith("gym."))
    rollouts = sum(1 for span in spans if span["name"] == "gym.rollout.dispatch")
    clients = sum(1 for span in spans if span["kind"] == 3)
    assert ours and rollouts and clients

    arguments = [f"--spans={RECEIVED_FULL}", f"--rollouts={rollouts}", "--seconds=0.2", "--rounds=2", "--times=3"]
    done = _span_price([*arguments, "--calls=200", "--settle=0.3"])
    assert done.returncode == 0, done.stderr
    price = json.loads(done.stdout)

    assert price["package_spans_per_rollout"] == ours / rollouts
    assert price["other_spans_per_rollout"] == (len(spans) - ours) / rollouts
    # Per round: the others alone, then the others with each of ours made three times; the receiver got them all.
    assert price["spans"]["received"] == 2 * ((len(spans) - ours) + (len(spans) - ours + 3 * ours))
    assert len(price["spans"]["rounds_total_ms"]) == 2
    assert price["baggage"]["hops_per_rollout"] == clients / rollouts
    assert "W3CBaggagePropagator" in price["baggage"]["propagators"]


def test_span_price_refuses_propagators_that_carry_no_baggage() -> None:
    env = {**os.environ, "OTEL_PROPAGATORS": "tracecontext"}
    done = _span_price([f"--spans={RECEIVED_FULL}", "--rollouts=1", "--seconds=0.1", "--rounds=1", "--settle=0.3"], env)
    assert done.returncode != 0
    assert "does not carry baggage" in done.stderr
