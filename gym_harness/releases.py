"""The NeMo Gym releases `make e2e` runs, as data: one entry per release, one pipeline for all.

Everything that differs between releases is here (interpreter, pinned requirements, configs,
servers, inputs, collection overrides, passes and which checks apply); e2e/run.py reads the table
and never branches on a version, and the whole-run benchmark takes 0.7.0's venv from it. The
files a release names (requirements, inputs, configs) stay in e2e/.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from gym_harness.paths import E2E_DIR, REPO

DATA = E2E_DIR / "data"


@dataclass(frozen=True)
class Pass:
    """One collection: `gym env start` and `gym eval run` against fresh servers, checked on its own."""

    name: str
    # Model-call capture (`+observability_enabled=true +model_call_capture_dir=…` on both commands).
    capture: bool
    # The verdicts the health pass must give over the whole pass (each one at least once, no
    # other but an `unobserved` NeMo Gym's row explains: see checks.check_health_spans); None
    # when the release has no health pass.
    verdicts: frozenset[str] | None = None
    # Settings of the package for this pass's processes (environment variables), beside the run's own.
    env: tuple[tuple[str, str], ...] = ()
    # Also export into a folder of per-process files (`gym_json_file`, the setup docs/nemo-gym.md
    # shows) and check `gym-instrument report` of that folder against the rows.
    span_files: bool = False


@dataclass(frozen=True)
class Release:
    version: str
    python: str  # major.minor of the interpreter the venv is built with
    venv: Path
    requirements: Path
    pip_options: tuple[str, ...]
    # Config files shipped inside the wheel, relative to its site-packages root, then this
    # directory's own (absolute).
    gym_configs: tuple[str, ...]
    e2e_configs: tuple[Path, ...]
    # Server directories (site-packages relative) whose per-server venv NeMo Gym looks for under
    # `uv_venv_dir`; each is pointed at the release's venv.
    server_dirs: tuple[str, ...]
    expected_servers: int
    inputs: tuple[Path, ...]
    eval_overrides: tuple[str, ...]
    passes: tuple[Pass, ...]
    # `POST /run` server spans per flat-row rollout: 0.7.0's environment server relays to the agent.
    flat_run_hops: int
    # A script run with the venv's Python after the passes (exit 0 = passed), or None.
    inprocess_check: Path | None = None
    # Also run the sharded flow (e2e/sharded.py): shard collectors, `gym eval aggregate`, `gym eval health-check`.
    sharded: bool = False
    # What tells this entry apart from another of the same release (its venv differs), or "".
    variant: str = ""
    # Contrib's aiohttp-client and FastAPI instrumentations are installed: the HTTP spans are checked
    # (without them the package's own propagation carries the context, and no HTTP span is ours).
    contrib: bool = True
    # The package's extras installed with it (``-e REPO[extras]``), or "".
    package_extras: str = ""

    @property
    def name(self) -> str:
        """The release and its variant: how a run names it (``--release``, its work folder, its results)."""
        return f"{self.version}-{self.variant}" if self.variant else self.version


WHEEL_CONFIGS = (
    "resources_servers/mcqa/configs/mcqa.yaml",
    "resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml",
    "responses_api_models/openai_model/configs/openai_model.yaml",
)
FLAT_SERVER_DIRS = (
    "resources_servers/mcqa",
    "resources_servers/example_single_tool_call",
    "responses_api_agents/simple_agent",
    "responses_api_models/openai_model",
)

RELEASES: tuple[Release, ...] = (
    Release(
        version="0.4.0",
        python="3.12",
        venv=REPO / ".venv-e2e",
        requirements=E2E_DIR / "requirements.txt",
        pip_options=(),
        gym_configs=WHEEL_CONFIGS,
        e2e_configs=(),
        server_dirs=FLAT_SERVER_DIRS,
        expected_servers=5,  # 2 resources servers, 2 agents, 1 model server
        inputs=(DATA / "tasks.jsonl",),
        eval_overrides=(),
        passes=(Pass("plain", capture=False),),
        flat_run_hops=1,
    ),
    Release(
        version="0.7.0",
        python="3.13",
        venv=REPO / ".venv-e2e-070",
        requirements=E2E_DIR / "requirements-070.txt",
        # The wheel declares Requires-Python >=3.13.14 and runs completely on 3.13.0.
        pip_options=("--ignore-requires-python",),
        gym_configs=WHEEL_CONFIGS,
        e2e_configs=(E2E_DIR / "configs" / "mcqa_single_agent_turn.yaml",),
        server_dirs=(*FLAT_SERVER_DIRS, "environment_servers/legacy_agent", "environment_servers/single_agent_turn"),
        # The five above, a legacy_agent environment server in front of each agent, and the
        # native mcqa environment: a session agent and its single_agent_turn environment server.
        expected_servers=9,
        inputs=(DATA / "tasks.jsonl", DATA / "tasks_native.jsonl"),
        eval_overrides=("+environment_server_routes={e2e_mcqa_native: mcqa_single_agent_turn}",),
        passes=(
            Pass("capture-on", capture=True, verdicts=frozenset({"healthy", "unhealthy"})),
            Pass("capture-off", capture=False, verdicts=frozenset({"unobserved"})),
        ),
        flat_run_hops=2,
        inprocess_check=E2E_DIR / "inprocess_070.py",
        sharded=True,
    ),
)
# 0.7.0 with no contrib HTTP instrumentation installed: the package alone carries the context
# across NeMo Gym's hops (its inject and receive targets). Two passes, the second with FastAPI's own
# telemetry off (the cheapest setup docs/nemo-gym.md describes: only the package's spans), and the
# sharded flow.
SERVER_TELEMETRY_OFF = (("OTEL_PYTHON_GYM_SERVER_TELEMETRY", "false"),)
BARE_070 = dataclasses.replace(
    RELEASES[1],
    variant="bare",
    venv=REPO / ".venv-e2e-070-bare",
    requirements=E2E_DIR / "requirements-070-bare.txt",
    passes=(
        Pass("capture-on", capture=True, verdicts=frozenset({"healthy", "unhealthy"})),
        Pass(
            "server-telemetry-off",
            capture=True,
            verdicts=frozenset({"healthy", "unhealthy"}),
            env=SERVER_TELEMETRY_OFF,
            span_files=True,
        ),
    ),
    inprocess_check=None,
    contrib=False,
    package_extras="report",  # docs/nemo-gym.md's copy-paste install: gym-instrument[report]
)
RELEASES = (*RELEASES, BARE_070)
