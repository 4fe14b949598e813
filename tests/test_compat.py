"""The OpenTelemetry internals of ``compat``: probed on today's API, and the public fallbacks tested.

The semantic suites run a second time with every probe forced off
(``GYM_INSTRUMENT_OTEL_PROBES=off``), in a fresh interpreter: the code that runs the day
OpenTelemetry keeps its context, suppression flag, global provider or span context some other
way must export the same spans as the code that runs today.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gym_instrument import compat

ROOT = Path(__file__).resolve().parent.parent
SEMANTIC_SUITES = [
    "tests/test_roles.py",
    "tests/test_extract.py",
    "tests/test_linkage.py",
    "tests/test_targets.py",
    "tests/test_framework_seams.py",
    "tests/test_job.py",
    "tests/test_score_after.py",
    "tests/reliability/test_property.py",
]


def test_every_probe_holds_on_the_installed_api() -> None:
    """On the OpenTelemetry this package is tested with, the per-call path takes the probed shortcuts
    (what the benchmarks measure); a release that changes one of them shows up here first."""
    assert compat.PROBES_ON
    assert compat.SUPPRESSION_KEYS
    assert compat.CONTEXT_KEYS is not None
    assert compat.SPAN_CONTEXT_IS_TUPLE
    assert compat.PROVIDER_ATTRIBUTE is not None
    assert compat.CONTEXT_VARIABLE is not None


def test_the_semantic_suites_pass_through_the_public_fallbacks() -> None:
    environment = {**os.environ, compat.PROBES_VARIABLE: "off"}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gym_instrument import compat; print(compat.SUPPRESSION_KEYS, compat.CONTEXT_KEYS, "
            "compat.SPAN_CONTEXT_IS_TUPLE, compat.PROVIDER_ATTRIBUTE, compat.CONTEXT_VARIABLE)",
        ],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert probe.stdout.split() == ["None", "None", "False", "None", "None"]
    suites = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SEMANTIC_SUITES],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert suites.returncode == 0, suites.stdout[-4000:] + suites.stderr[-2000:]
    assert " passed" in suites.stdout.splitlines()[-1]
