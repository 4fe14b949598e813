"""OpenTelemetry auto-instrumentation for reinforcement-learning rollout pipelines.

Spans ``gym.rollout.dispatch``, ``gym.verify`` and ``gym.rollout.health`` name each rollout
(task id, repeat, rollout id) and show its outcome (reward, health verdict, failed checks).
See :mod:`gym_instrument.instrumentor` for the three ways to turn it on.

The public surface is what this module exports (``__all__``), :mod:`gym_instrument.semconv`,
:mod:`gym_instrument.schema` (to write a framework's schema) and the ``gym-instrument`` command;
every other module is internal and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gym_instrument import semconv
from gym_instrument.extract import Call, at_start
from gym_instrument.instrumentor import GymInstrumentor
from gym_instrument.targets import DECORATORS, RoleDecorator, Target
from gym_instrument.version import __version__

# One decorator per role of the table (gym_instrument.roles.ROLES) that has one:
# @gym_instrument.dispatch, @gym_instrument.verify, @gym_instrument.health.
globals().update(DECORATORS)
if TYPE_CHECKING:
    dispatch: RoleDecorator
    verify: RoleDecorator
    health: RoleDecorator

__all__ = ["Call", "GymInstrumentor", "RoleDecorator", "Target", "__version__", "at_start", "semconv", *DECORATORS]
