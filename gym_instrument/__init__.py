"""OpenTelemetry auto-instrumentation for reinforcement-learning rollout pipelines.

Spans ``gym.rollout.dispatch``, ``gym.verify`` and ``gym.rollout.health`` name each rollout
(task id, repeat, rollout id) and show its outcome (reward, health verdict, failed checks).
See :mod:`gym_instrument.instrumentor` for the three ways to turn it on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from gym_instrument import semconv
from gym_instrument.extract import Call, at_start
from gym_instrument.instrumentor import GymInstrumentor
from gym_instrument.targets import Target, decorate
from gym_instrument.version import __version__

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Call", "GymInstrumentor", "Target", "__version__", "at_start", "dispatch", "health", "semconv", "verify"]


def dispatch(function: F | None = None, **options: Any) -> Any:
    """Trace a function that dispatches one rollout row as ``gym.rollout.dispatch``.

    ``@dispatch`` or ``@dispatch(row_arg="episode", extractors=[...], default_extractors=True, when={...})``.
    """
    return decorate(semconv.ROLE_DISPATCH, function, **options)


def verify(function: F | None = None, **options: Any) -> Any:
    """Trace a function that scores one rollout as ``gym.verify`` (same options as :func:`dispatch`)."""
    return decorate(semconv.ROLE_VERIFY, function, **options)


def health(function: F | None = None, **options: Any) -> Any:
    """Turn the verdicts a function returns into ``gym.rollout.health`` spans under their dispatches."""
    return decorate(semconv.ROLE_HEALTH, function, **options)
