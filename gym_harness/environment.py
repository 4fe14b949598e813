"""The environment of a run's processes: where their temporary files go, and what OpenTelemetry,
Ray and NeMo Gym are told (everything on 127.0.0.1, spans to the run's own receiver)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gym_harness.processes import RUN_MARKER_VAR

# Ray puts AF_UNIX sockets about 70 characters below RAY_TMPDIR, and a socket path over 107
# bytes breaks its dashboard (start-up goes from about 17 s to 75 s).
RAY_TMPDIR_MAX_LENGTH = 32


@dataclass
class Scratch:
    """The run's temporary folders: TMPDIR inside the work folder, and a short RAY_TMPDIR."""

    tmpdir: Path
    ray_tmp: Path

    @classmethod
    def create(cls, work: Path) -> Scratch:
        """TMPDIR and RAY_TMPDIR in ``work`` (RAY_TMPDIR in /tmp when ``work``'s path is too long for Ray)."""
        tmpdir = work / "tmp"
        tmpdir.mkdir(parents=True)
        ray_tmp = work / "ray"
        if len(str(ray_tmp)) > RAY_TMPDIR_MAX_LENGTH:
            ray_tmp = Path(tempfile.mkdtemp(prefix="gie2e-"))  # a checkout deep below /: keep it short
        ray_tmp.mkdir(exist_ok=True)
        return cls(tmpdir, ray_tmp)

    def remove(self) -> None:
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def otlp_variables(service: str, receiver_port: int) -> dict[str, str]:
    """OpenTelemetry's variables for a run: export over OTLP/HTTP to the run's receiver, quickly."""
    return {
        "OTEL_SERVICE_NAME": service,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "OTEL_METRIC_EXPORT_INTERVAL": "1000",
        # Delta counters can be summed across processes without knowing which sent what.
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta",
    }


def base_env(venv: Path, marker: str, receiver_port: int, scratch: Scratch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        {
            RUN_MARKER_VAR: marker,
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            # Everything stays on this machine, and every temporary file in the work folder.
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "TMPDIR": str(scratch.tmpdir),
            # Ray: bind to 127.0.0.1, keep its files in a short folder of ours, report nothing home.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(scratch.ray_tmp),
            **otlp_variables("nemo-gym-e2e", receiver_port),
            # Ray's processes run under the launcher too: its dashboard polls `/api/healthz` through
            # the instrumented aiohttp client many times a second (about 300 spans a second with nine
            # servers), and Ray records its own metrics through the launcher's meter provider.
            "OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS": "/api/healthz",
        }
    )
    return env
