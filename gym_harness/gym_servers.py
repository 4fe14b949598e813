"""NeMo Gym's servers for an e2e run: `gym env start` under the launcher against the scripted model,
each server's venv pointed at the release's, waited for until every server is ready."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gym_harness.processes import E2EFailure, Processes, exited, wait_for
from gym_harness.releases import Release
from gym_harness.venvs import site_packages

TIMEOUT_SERVERS_READY = 300
READY = re.compile(r"All (\d+) / (\d+) servers ready")


def gym_configs(release: Release, venv_python: Path) -> list[str]:
    """`--config` arguments: the release's configs in its wheel, then e2e's own."""
    site = site_packages(venv_python)
    paths = [str(site / path) for path in release.gym_configs] + [str(path) for path in release.e2e_configs]
    return [arg for path in paths for arg in ("--config", path)]


def server_venvs(release: Release, work: Path) -> Path:
    """NeMo Gym would build one uv venv per server; a folder that points each at the release's venv."""
    root = work / "server-venvs"
    for server_dir in release.server_dirs:
        (root / server_dir).mkdir(parents=True)
        (root / server_dir / ".venv").symlink_to(release.venv, target_is_directory=True)
    return root


def start_servers(
    processes: Processes,
    launcher: list[str],
    configs: list[str],
    model_port: int,
    overrides: list[str],
    env_log: Path,
    work: Path,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """`gym env start` (``launcher`` then `env start`), its model the scripted one on ``model_port``,
    with ``overrides`` (head server, capture, the server venvs): its process, and how many servers
    were ready (``E2EFailure`` when it exits first or reports fewer ready than it started)."""
    env_start = processes.start(
        "gym env start",
        [
            *launcher,
            "env",
            "start",
            *configs,
            f"+policy_base_url=http://127.0.0.1:{model_port}/v1",
            "+policy_api_key=e2e-dummy-key",
            "+policy_model_name=scripted-model",
            "+skip_venv_if_present=true",
            *overrides,
        ],
        env_log,
        work,
        env,
    )

    def servers_ready() -> bool:
        match = READY.search(env_log.read_text(errors="replace")) if env_log.exists() else None
        if match and match.group(1) != match.group(2):
            raise E2EFailure(f"NeMo Gym reported {match.group(0)}; log: {env_log}")
        return bool(match)

    wait_for(
        "`All N / N servers ready` from gym env start",
        servers_ready,
        TIMEOUT_SERVERS_READY,
        exited(env_start, "gym env start", env_log),
        interval=1,
    )
    found = READY.search(env_log.read_text(errors="replace"))
    return env_start, int(found.group(1)) if found else 0
