"""OpenTelemetry instrumentation for rollout pipelines (NeMo Gym first).

Usage
-----
Zero code — the launcher finds this instrumentor through the ``opentelemetry_instrumentor``
entry point named ``gym``; configure it with ``OTEL_PYTHON_GYM_*`` variables::

    OTEL_PYTHON_GYM_TARGETS="my_loop.rollouts:send_row=dispatch,my_loop.scoring:score=verify" \\
        opentelemetry-instrument python my_loop.py

In a script::

    from gym_instrument import GymInstrumentor

    GymInstrumentor().instrument(
        tracer_provider=tracer_provider,          # default: the global provider
        meter_provider=meter_provider,            # default: the global provider
        targets=["my_loop.rollouts:send_row=dispatch"],
        extractors={"verify": [my_extractor]},    # added to the role's defaults
    )
    ...
    GymInstrumentor().uninstrument()

Both at once — a script run under the launcher, which has already called ``instrument()`` at
startup: the script's ``instrument(...)`` is added to the running instrumentation instead of being
dropped. Its targets are armed and its extractors (and ``replace_default_extractors``) join the
running ones, for every target of their role, as if one call had been given both; any other
argument it gives (``tracer_provider``, ``link_capacity``, ``presets``...) replaces the running
value, and what it does not give stays as the launcher configured it. Functions already wrapped
stay wrapped (a reference taken to one keeps working) and take the new extractors.
``uninstrument()`` undoes all of it.

On code you own, the same roles as decorators::

    import gym_instrument

    @gym_instrument.dispatch
    async def run_rollout(row): ...

Arguments of ``instrument()``: ``tracer_provider``, ``meter_provider``, ``targets`` (Target
objects, ``"module:Qualified.name=role"`` strings, ``"...=role@nemo_gym"`` to read a framework's
fields instead of the common names, or mappings of the declarative form, on top of the presets),
``config`` (targets in the declarative form: a TOML or JSON file, its text, or a mapping; see
``gym_instrument.config.declare``), ``presets`` (default ``["nemo_gym", "verifiers", "inspect_ai"]``,
each armed only when its framework is imported; ``"none"`` arms none), ``extractors`` (role -> callables),
``replace_default_extractors`` (roles whose defaults your extractors replace), ``link_capacity``
(dispatch span contexts remembered for their health verdicts, default 1,000,000) and
``link_dir`` and ``link_files`` (where ended dispatches are persisted for a health pass in another
process: beside the run's output, or in ``link_dir``; ``link_files=False`` persists and reads
nothing), ``baggage`` (False keeps the rollout id in-process instead of in W3C baggage) and
``job_context`` (``"link"``, ``"parent"`` or ``"ignore"``: how a dispatch span with no other parent
is tied to the ``TRACEPARENT`` the process was started with), ``propagation`` (False: the package
carries no context across a framework's HTTP hops itself; its ``receive`` targets only isolate),
``server_telemetry`` (False: a server framework's own telemetry, FastAPI's since 0.165, is off for
the requests its ``receive`` targets handle),
``model_calls`` (False: no span per model call; ``model_call`` targets are not wrapped at all) and
``train_step`` (where a dispatch's training step and policy version come from: ``"baggage"``, the
default, reads the baggage entries ``nemo.gym.train.step`` and ``nemo.gym.policy.version`` of its
context, else of the process's ``BAGGAGE``; ``"off"``; or ``"120"``, ``"120:ckpt-120"`` for every
dispatch of the process; see ``gym_instrument.record.step``).

Called from the main thread, ``instrument()`` also makes a process stopped by SIGTERM (Slurm,
Kubernetes; a uvicorn server raises it again after its shutdown) export the spans and metrics it
still holds first: its handler force-flushes the tracer and meter providers, then lets the signal
do what it did before (``gym_instrument.record.exit``; ``uninstrument()`` puts back what it found).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from gym_instrument import semconv
from gym_instrument.config.declare import preset_targets
from gym_instrument.config.settings import GymConfig
from gym_instrument.frameworks import DEFAULT_SCHEMA
from gym_instrument.link.files import LinkFiles
from gym_instrument.link.memory import DispatchLinks
from gym_instrument.package import _instruments
from gym_instrument.plan.engine import ENGINE, Setup
from gym_instrument.record.exit import flush_on_signals, stop_flushing_on_signals
from gym_instrument.record.job import JobContext, environment_baggage, job_context
from gym_instrument.record.recorder import Recorder
from gym_instrument.record.step import TRAIN_STEPS, StepSource
from gym_instrument.role import ROLES
from gym_instrument.role.base import Hops
from gym_instrument.target.decorators import use_role_extractors
from gym_instrument.target.find import target_problem
from gym_instrument.target.patcher import Patcher
from gym_instrument.target.target import Target

_LOG = logging.getLogger("gym_instrument")


@dataclass(frozen=True)
class _Running:
    """What the ``instrument()`` in effect configured, armed and records with."""

    config: GymConfig
    targets: tuple[Target, ...]
    patcher: Patcher
    recorder: Recorder
    links: DispatchLinks
    job: JobContext | None
    link_files: LinkFiles | None


class GymInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Wraps rollout dispatch, verify and health functions to emit ``gym.*`` spans and metrics.

    A singleton (as every ``BaseInstrumentor``). Calling ``instrument()`` again while instrumented
    — a script run under ``opentelemetry-instrument`` — adds its targets and extractors to the
    running instrumentation and applies its other arguments (see the module's documentation);
    ``uninstrument()`` undoes everything every call armed.
    """

    _running: _Running | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def instrument(self, **kwargs: Any) -> Any:
        """Instrument; when already instrumented, add this call's arguments to the running instrumentation.

        A bad argument raises ``ValueError`` and leaves the running instrumentation as it was.
        """
        running = GymInstrumentor._running
        if not self._is_instrumented_by_opentelemetry or running is None:
            return super().instrument(**kwargs)
        config = GymConfig.resolve(kwargs, running=running.config, check=True)
        self._arm(config, running)
        changed = [name for name in GymConfig.settings() if getattr(config, name) != getattr(running.config, name)]
        _LOG.info(
            "gym_instrument: instrument() called while instrumented (under opentelemetry-instrument?): %s",
            f"applied {', '.join(changed)}" if changed else "nothing new",
        )
        return None

    def _instrument(self, **kwargs: Any) -> None:
        self._arm(GymConfig.resolve(kwargs, check=True), None)

    @staticmethod
    def _arm(config: GymConfig, running: _Running | None) -> None:
        """Record with ``config`` and arm its targets; what did not change from ``running`` is kept
        (the recorder, the remembered dispatches, the job context, the wrapped functions)."""
        targets = (*(target for name in config.presets for target in preset_targets(name)), *config.targets, *config.config)
        if not config.model_calls:  # off: model-call targets are not wrapped at all (nothing to pay per call)
            targets = tuple(target for target in targets if target.role != semconv.ROLE_MODEL_CALL)
        before = running.config if running is not None else None

        def unchanged(*names: str) -> bool:
            return before is not None and all(getattr(before, name) == getattr(config, name) for name in names)

        if running is not None and unchanged("tracer_provider", "meter_provider"):
            recorder = running.recorder
        else:
            recorder = Recorder(config.tracer_provider, config.meter_provider)
        if running is not None and unchanged("link_capacity"):
            links = running.links
        else:
            links = DispatchLinks(config.link_capacity)
            if running is not None and len(running.links):
                _LOG.warning(
                    "gym_instrument: link_capacity changed: %d remembered dispatches dropped; their verdicts make no span",
                    len(running.links),
                )
        job = running.job if running is not None and unchanged("job_context") else job_context(config.job_context)
        if running is None or not unchanged("train_step"):
            TRAIN_STEPS.configure(config.train_step, environment_baggage())
        if running is not None and unchanged("link_dir", "link_files", "link_capacity"):
            link_files = running.link_files
        else:
            if running is not None and running.link_files is not None:
                running.link_files.close()
            link_files = LinkFiles(config.link_dir, capacity=config.link_capacity) if config.link_files else None
        # Dispatches are found by task id and repeat too only when a target may name them so.
        links.by_task = _tasks_named(targets)
        if link_files is not None:
            link_files.by_task = links.by_task
        setup = Setup(
            recorder,
            links,
            config.baggage,
            remembers=_verdicts_can_come(targets),
            job=job,
            link_files=link_files,
            hops=Hops(config.propagation, config.server_telemetry),
        )
        ENGINE.configure(setup)

        if running is None:
            patcher = Patcher(DEFAULT_SCHEMA, config.extractors, config.replace_default_extractors)
            patcher.arm(targets)
        else:
            # The same patcher, updated in place: what stays wrapped keeps its wrappers (and takes
            # the extractors added now), new targets are armed, and restore() still puts back all.
            patcher = running.patcher
            patcher.update(targets, config.extractors, config.replace_default_extractors)
        use_role_extractors(config.extractors, config.replace_default_extractors)  # decorated functions too
        # A process stopped by SIGTERM (a server under Slurm or Kubernetes) exports what it still holds.
        flush_on_signals((config.tracer_provider, config.meter_provider))
        GymInstrumentor._running = _Running(config, targets, patcher, recorder, links, job, link_files)

    def _uninstrument(self, **kwargs: Any) -> None:
        running, GymInstrumentor._running = GymInstrumentor._running, None
        stop_flushing_on_signals()
        if running is not None:
            running.patcher.restore()
            use_role_extractors({}, ())
            if running.link_files is not None:
                running.link_files.close()  # what was queued is written
        ENGINE.configure(Setup(Recorder(), DispatchLinks(ENGINE.links.capacity), True))
        TRAIN_STEPS.configure(StepSource())


def _tasks_named(targets: tuple[Target, ...]) -> bool:
    """Whether a target may look a dispatch up by its task id and repeat alone (a verdict or a verify
    after its dispatch that names no rollout id and no task index)."""
    for target in targets:
        role = ROLES[target.role].for_target(target.schema, target.extractors)
        if role.finds_by_task(target.schema or DEFAULT_SCHEMA, target.extractors):
            return True
    return False


def _verdicts_can_come(targets: tuple[Target, ...]) -> bool:
    """Whether a health target (or another that looks up ended dispatches: a verify that names its
    rollout after the dispatch ended) could ever be wrapped: its module can be found (nothing imported
    to know). Only then are ended dispatches remembered for verdicts; a preset's health target
    for a version of its framework without one (nemo-gym 0.4.0 has no ``rollout_health``) would
    otherwise fill the dispatch memory with entries no verdict reads. A ``@health`` function turns
    remembering on by itself (the engine does)."""
    looks_up = (target for target in targets if ROLES[target.role].for_target(target.schema, target.extractors).uses_links)
    return any(target_problem(target, suggest=False) is None for target in looks_up)
