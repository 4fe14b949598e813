"""OpenTelemetry auto-instrumentation for reinforcement-learning rollout pipelines.

Spans ``gym.rollout.dispatch``, ``gym.verify`` and ``gym.rollout.health`` name each rollout
(task id, repeat, rollout id) and show its outcome (reward, health verdict, failed checks).
See :mod:`gym_instrument.instrumentor` for the three ways to turn it on.

The public surface is what this module exports (``__all__``), one decorator per role of the role
table that has one (``gym_instrument.dispatch``, ``.verify``, ``.health``),
:mod:`gym_instrument.semconv`, :mod:`gym_instrument.schema` (to write a framework's schema) and the
``gym-instrument`` command; every other module is internal and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gym_instrument import semconv
from gym_instrument.plan.call import Call
from gym_instrument.schema.base import GENERIC
from gym_instrument.schema.extractors import at_start
from gym_instrument.target.decorators import RoleDecorator, decorated_roles, decorator
from gym_instrument.target.target import Target
from gym_instrument.version import __version__

if TYPE_CHECKING:
    from gym_instrument.instrumentor import GymInstrumentor

    dispatch: RoleDecorator
    verify: RoleDecorator
    health: RoleDecorator


def __getattr__(name: str) -> Any:
    """``gym_instrument.<role>``: the decorator of a role of the table, made when it is asked for
    (a role added to the table later has one too). A decorated function is the user's own code: it
    reads the common field names (the generic schema) unless the decorator is given ``schema=``.

    ``gym_instrument.GymInstrumentor`` is imported when it is asked for (the launcher's entry point
    asks): a process that only decorates, or runs a ``gym-instrument`` command, never instruments and
    need not import OpenTelemetry's instrumentor base and the configuration layer."""
    if name == "GymInstrumentor":
        from gym_instrument.instrumentor import GymInstrumentor

        globals()[name] = GymInstrumentor  # asked once: a plain attribute from then on
        return GymInstrumentor
    found = decorator(name, GENERIC)
    if found is None:
        raise AttributeError(f"module 'gym_instrument' has no attribute {name!r}")
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), "GymInstrumentor", *decorated_roles()})


__all__ = ["Call", "GymInstrumentor", "RoleDecorator", "Target", "__version__", "at_start", "semconv"]
