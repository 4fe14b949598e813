"""Copy the files a real ``make e2e`` run wrote into this folder, as fixtures for ``tests/test_replay.py``.

Per pass: what NeMo Gym wrote (``.e2e-work/<release>/<pass>/rollouts/*.jsonl``, as they are) and
the package's own spans as the e2e's OTLP receiver got them from the live run, rewritten as
OTLP/JSON lines (one span per ``resourceSpans`` line, which the receiver prints without its
resource) in ``live_spans.otlp.jsonl``. Run from the repository root after ``make e2e``::

    python3 tests/data/e2e_runs/copy_from_e2e.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE.parents[2] / ".e2e-work"
PASSES = {"nemo-gym-0.4.0": WORK / "0.4.0" / "plain", "nemo-gym-0.7.0": WORK / "0.7.0" / "capture-on"}
GYM_SPANS = ('"name":"gym.rollout.dispatch"', '"name":"gym.verify"', '"name":"gym.rollout.health"')


def main() -> None:
    for name, source in PASSES.items():
        target = HERE / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for path in sorted((source / "rollouts").glob("*.jsonl")):
            shutil.copy(path, target / path.name)
        with open(source / "received.ndjson", errors="replace") as received, open(target / "live_spans.otlp.jsonl", "w") as out:
            for line in received:
                if not any(marker in line for marker in GYM_SPANS):
                    continue
                span = json.loads(line)
                batch = {
                    "resourceSpans": [
                        {
                            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "nemo-gym-e2e"}}]},
                            "scopeSpans": [{"scope": {"name": "gym_instrument"}, "spans": [span]}],
                        }
                    ]
                }
                out.write(json.dumps(batch, separators=(",", ":")) + "\n")
        print(f"{name}: {sorted(path.name for path in target.iterdir())}")


if __name__ == "__main__":
    main()
