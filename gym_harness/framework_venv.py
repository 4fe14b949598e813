"""A released framework other than NeMo Gym (verifiers, inspect-ai) in a venv of its own: its
interpreter found, the venv built from its pinned requirements and this checkout's package
(editable), reused while its stamp matches; and the environment its run gets under the launcher."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gym_harness.environment import otlp_variables
from gym_harness.paths import REPO
from gym_harness.processes import RUN_MARKER_VAR, E2EFailure, Processes, exited, port_open, wait_for
from gym_harness.venvs import stamped_venv


@dataclass(frozen=True)
class FrameworkVenv:
    """``what`` (e.g. ``verifiers 0.4.0``) installed from ``requirements`` into ``venv`` with a Python of at
    least ``minimum``: ``$<variable>``, else this interpreter, else ``python3.<minor>`` on PATH."""

    what: str
    venv: Path
    requirements: Path
    minimum: tuple[int, int]
    variable: str

    def find_python(self) -> str:
        major, minor = self.minimum
        candidates = [os.environ.get(self.variable, ""), sys.executable if sys.version_info >= self.minimum else ""]
        candidates += [shutil.which(f"python{major}.{newer}") or "" for newer in range(minor, 14)]
        for candidate in filter(None, candidates):
            probe = subprocess.run(
                [candidate, "-c", f"import sys; print(sys.version_info >= {self.minimum})"], capture_output=True, text=True
            )
            if probe.stdout.strip() == "True":
                return candidate
        raise E2EFailure(f"{self.what} needs Python {major}.{minor}+; none found (set {self.variable})")

    def ensure(self, install_log: Path) -> Path:
        """The venv's interpreter, the venv built first unless its stamp matches (pip's output in ``install_log``)."""
        python = self.find_python()
        digest = hashlib.sha256()
        for part in (self.requirements.read_bytes(), (REPO / "pyproject.toml").read_bytes(), str(REPO).encode()):
            digest.update(part)
        digest.update(subprocess.run([python, "-VV"], capture_output=True, text=True).stdout.encode())
        pip_arguments = ["-r", str(self.requirements), "-e", str(REPO)]
        return stamped_venv(self.venv, python, digest.hexdigest(), pip_arguments, install_log, self.what)

    def start_receiver(self, processes: Processes, port: int, spans_path: Path, work: Path, env: Mapping[str, str]) -> None:
        """The venv's ``oteltap`` OTLP receiver on 127.0.0.1:``port``, writing to ``spans_path``, with the
        run's environment less its OpenTelemetry settings (it exports nothing of its own); ready on return."""
        plain_env = {key: value for key, value in env.items() if not key.startswith("OTEL_")}
        receiver = processes.start(
            "oteltap", [str(self.venv / "bin" / "oteltap"), "--port", str(port)], spans_path, work, plain_env
        )
        wait_for(f"the OTLP receiver on 127.0.0.1:{port}", lambda: port_open(port), 30, exited(receiver, "oteltap", spans_path))

    def run_env(
        self, marker: str, receiver_port: int, service: str, tmpdir: Path, extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The run's environment: no ``OTEL_PYTHON_GYM_*`` at all (the default presets are what is under
        test), the venv first on PATH, everything on 127.0.0.1, spans to the run's own receiver."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("OTEL_PYTHON_GYM_")
        }
        env.update(
            {
                RUN_MARKER_VAR: marker,
                "PATH": f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                "PYTHONUNBUFFERED": "1",
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "TMPDIR": str(tmpdir),
                **otlp_variables(service, receiver_port),
                **(extra or {}),
            }
        )
        return env
