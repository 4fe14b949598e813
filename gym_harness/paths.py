"""Where the harness's files are: the checkout it runs from, e2e's data, and the work folder of a run."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
E2E_DIR = REPO / "e2e"  # the releases' requirements, inputs and configs, and e2e's own scripts
BENCHMARKS = REPO / "benchmarks"  # the whole run's hooks and probes, run by path in other interpreters
WORK = REPO / ".e2e-work"  # logs of the last run (pip's, the servers', the collections')
MODEL_SERVER = Path(__file__).resolve().parent / "model_server.py"  # run as a program, by any Python 3.9+
