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

On code you own, the same roles as decorators::

    import gym_instrument

    @gym_instrument.dispatch
    async def run_rollout(row): ...

Arguments of ``instrument()``: ``tracer_provider``, ``meter_provider``, ``targets`` (Target
objects or ``"module:Qualified.name=role"`` strings, on top of the presets), ``presets``
(default ``["nemo_gym"]``; ``"none"`` arms none), ``extractors`` (role -> callables),
``replace_default_extractors`` (roles whose defaults your extractors replace), ``link_capacity``
(dispatch span contexts remembered for their health verdicts, default 1,000,000) and
``baggage`` (False keeps the rollout id in-process instead of in W3C baggage) and
``job_context`` (``"link"``, ``"parent"`` or ``"ignore"``: how a dispatch span with no other parent
is tied to the ``TRACEPARENT`` the process was started with).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from gym_instrument import semconv
from gym_instrument.config import GymConfig, target_problem
from gym_instrument.job import job_context
from gym_instrument.linkage import DispatchLinks
from gym_instrument.package import _instruments
from gym_instrument.presets import PRESETS
from gym_instrument.record import Recorder
from gym_instrument.roles import ENGINE, Setup
from gym_instrument.targets import Patcher, Target

_LOG = logging.getLogger("gym_instrument")


class GymInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Wraps rollout dispatch, verify and health functions to emit ``gym.*`` spans and metrics."""

    _patcher: Patcher | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        config = GymConfig.resolve(kwargs, check=True)
        targets: list[Target] = [target for name in config.presets for target in PRESETS[name]]
        targets.extend(config.targets)
        ENGINE.configure(
            Setup(
                Recorder(config.tracer_provider, config.meter_provider),
                DispatchLinks(config.link_capacity),
                config.baggage,
                remembers=_verdicts_can_come(targets),
                job=job_context(config.job_context),
            )
        )
        patcher = Patcher(config.extractors, config.replace_default_extractors)
        GymInstrumentor._patcher = patcher
        patcher.arm(targets)

    def _uninstrument(self, **kwargs: Any) -> None:
        patcher, GymInstrumentor._patcher = GymInstrumentor._patcher, None
        if patcher is not None:
            patcher.restore()
        ENGINE.configure(Setup(Recorder(), DispatchLinks(ENGINE.links.capacity), True))


def _verdicts_can_come(targets: list[Target]) -> bool:
    """Whether a health target could ever be wrapped: its module can be found (nothing imported
    to know). Only then are ended dispatches remembered for verdicts; a preset's health target
    for a version of its framework without one (nemo-gym 0.4.0 has no ``rollout_health``) would
    otherwise fill the dispatch memory with entries no verdict reads. A ``@health`` function turns
    remembering on by itself (the engine does)."""
    return any(target.role == semconv.ROLE_HEALTH and target_problem(target) is None for target in targets)
