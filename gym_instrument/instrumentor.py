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
import sys
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from gym_instrument import semconv
from gym_instrument.config import ENV_TARGETS, GymConfig
from gym_instrument.extract import Extractor
from gym_instrument.job import job_context
from gym_instrument.linkage import DispatchLinks
from gym_instrument.package import _instruments
from gym_instrument.plan import ENGINE, Setup
from gym_instrument.presets import PRESETS
from gym_instrument.record import Recorder
from gym_instrument.roles import ROLES
from gym_instrument.targets import Patcher, Target, check_importable

_LOG = logging.getLogger("gym_instrument")


def _check_extractors(extractors: Any) -> dict[str, tuple[Extractor, ...]]:
    if extractors is None:
        return {}
    if not isinstance(extractors, Mapping):
        raise ValueError("extractors must map a role (dispatch, verify, health) to a list of callables")
    checked: dict[str, tuple[Extractor, ...]] = {}
    for role, callables in extractors.items():
        if role not in ROLES:
            raise ValueError(f"extractors: unknown role {role!r}; expected one of {', '.join(ROLES)}")
        items = (callables,) if callable(callables) else tuple(callables)
        if not all(callable(item) for item in items):
            raise ValueError(f"extractors for {role!r} must be callables")
        checked[role] = items
    return checked


def _check_roles(roles: Iterable[str] | None) -> frozenset[str]:
    roles = frozenset([roles] if isinstance(roles, str) else roles or ())
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"replace_default_extractors: unknown role(s) {sorted(unknown)}")
    return roles


class GymInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Wraps rollout dispatch, verify and health functions to emit ``gym.*`` spans and metrics."""

    _patcher: Patcher | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        code_targets = kwargs.get("targets")
        config = GymConfig.resolve(kwargs)
        extractors = _check_extractors(kwargs.get("extractors"))
        replace_defaults = _check_roles(kwargs.get("replace_default_extractors"))

        targets: list[Target] = [target for name in config.presets for target in PRESETS[name]]
        for target in config.targets:
            problem = check_importable(target) or _missing_attribute(target)
            if problem is None:
                targets.append(target)
            elif code_targets is not None:
                raise ValueError(problem)
            else:
                _LOG.error("gym_instrument: %s: skipped %s", ENV_TARGETS, problem)

        ENGINE.configure(
            Setup(
                Recorder(kwargs.get("tracer_provider"), kwargs.get("meter_provider")),
                DispatchLinks(config.link_capacity),
                config.baggage,
                remembers=any(target.role == semconv.ROLE_HEALTH for target in targets),
                job=job_context(config.job_context),
            )
        )
        patcher = Patcher(extractors, replace_defaults)
        GymInstrumentor._patcher = patcher
        patcher.arm(targets)

    def _uninstrument(self, **kwargs: Any) -> None:
        patcher, GymInstrumentor._patcher = GymInstrumentor._patcher, None
        if patcher is not None:
            patcher.restore()
        ENGINE.configure(Setup(Recorder(), DispatchLinks(ENGINE.links.capacity), True))


def _missing_attribute(target: Target) -> str | None:
    """Why a target whose module is already imported cannot be found there, or None."""
    module = sys.modules.get(target.module)
    if module is None:
        return None  # found when its module is imported (post-import hook)
    owner: Any = module
    *owner_path, attribute = target.qualname.split(".")
    for part in owner_path:
        owner = getattr(owner, part, None)
        if owner is None:
            return f"target {target}: module {target.module!r} has no attribute {target.qualname!r}"
    try:
        defined_here = attribute in vars(owner)
    except TypeError:
        defined_here = False
    if defined_here:
        return None
    if getattr(owner, attribute, None) is not None:  # patching it would need the class that defines it
        return f"target {target}: {target.qualname!r} is inherited, not defined there; target the class that defines it"
    return f"target {target}: module {target.module!r} has no attribute {target.qualname!r}"
