"""An environment of our own, served by OpenEnv: guess a number from "higher"/"lower" hints.

Small and deterministic: a task names its number; each step's reward is 1.0 for the right
number, else minus the distance over 16; an episode ends on the right number or after five
steps. A guess below zero raises (``OffTheBoard``) inside ``step``, which OpenEnv's server runs in
the session's executor thread: the one step of the e2e that fails in the server.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

MOST_STEPS = 5


class OffTheBoard(ValueError):
    """A guess no board has: the environment's own exception type."""


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    hint: str = ""  # "higher", "lower", "right", or "" before the first guess


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    """One session's game (OpenEnv makes one per WebSocket session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._target = 0
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, target: int = 0, **kwargs: Any) -> GuessObservation:
        self._target = target
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation()

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        if action.guess < 0:
            raise OffTheBoard(f"no square {action.guess}")
        self._state.step_count += 1
        if action.guess == self._target:
            return GuessObservation(hint="right", reward=1.0, done=True)
        hint = "higher" if action.guess < self._target else "lower"
        reward = -abs(action.guess - self._target) / 16
        return GuessObservation(hint=hint, reward=reward, done=self._state.step_count >= MOST_STEPS)

    @property
    def state(self) -> State:
        return self._state
