"""The ``hand`` configuration: the package's spans written by hand into NeMo Gym 0.7.0, and the check that they match.

    patch     the hand-written telemetry itself; runs inside the NeMo Gym venv, never imported here
    likeness  whether two configurations exported the same spans per rollout (names, kinds, attribute keys)

:func:`install` puts ``patch.py`` into the NeMo Gym venv's site-packages as ``_gym_bench_hand``, compiled
as pip compiles what it installs, with a ``.pth`` line that arms it at an interpreter's start only where
``GYM_BENCH_HAND`` is set (the ``hand`` configuration's processes): every other process of the venv imports
nothing of it. :func:`remove` takes them out again. The wheel's own files are never touched.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gym_harness.paths import REPO

ACTIVE_VAR = "GYM_BENCH_HAND"  # patch.ACTIVE_VAR (patch.py is not imported here: it needs OpenTelemetry)
MODULE = "_gym_bench_hand"
SOURCE = REPO / "gym_harness" / "bench" / "hand" / "patch.py"
# A .pth line that starts with "import" is executed: inert, and importing nothing more, without the variable.
PTH_LINE = f'import os; os.environ.get("{ACTIVE_VAR}") and __import__("{MODULE}").arm()\n'


def install(venv_python: Path, site: Path) -> None:
    """``patch.py`` as ``_gym_bench_hand`` in ``site`` (the venv of ``venv_python``), with its bytecode and its ``.pth``.

    Compiled here because a process that finds no bytecode compiles the source at every start when
    ``PYTHONDONTWRITEBYTECODE`` is set (as on the machine this is measured on): a cost no in-tree code has."""
    shutil.copy(SOURCE, site / f"{MODULE}.py")
    subprocess.run([str(venv_python), "-m", "compileall", "-q", str(site / f"{MODULE}.py")], check=True)
    (site / f"{MODULE}.pth").write_text(PTH_LINE)


def remove(site: Path) -> None:
    """The module, its bytecode and its ``.pth`` out of ``site`` again."""
    (site / f"{MODULE}.pth").unlink(missing_ok=True)
    (site / f"{MODULE}.py").unlink(missing_ok=True)
    for cached in (site / "__pycache__").glob(f"{MODULE}.*.pyc"):
        cached.unlink(missing_ok=True)
