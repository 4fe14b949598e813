"""verifiers (package ``verifiers``, the ``verifiers.v1`` stack of 0.4.0): each episode attempt is a
dispatch, each task's scoring a verify, in the declarative form (:mod:`gym_instrument.declare`).
Both targets are optional. Which fields they read is the schema beside it (``verifiers_schema.py``)."""

from __future__ import annotations

from typing import Any

from gym_instrument.declare import parse_config
from gym_instrument.presets.verifiers_schema import DISPATCH, VERIFY
from gym_instrument.targets import Target

PRESET: dict[str, Any] = {
    "targets": [
        # Awaited once per attempt by Env.run_slot (a retried episode is a second dispatch).
        {"path": "verifiers.v1.env:Env.run_episode", "role": "dispatch", "optional": True, **DISPATCH},
        # Awaited inside the episode, so its span is a child of the dispatch span; a Task subclass
        # that overrides score is reached through the base class.
        {"path": "verifiers.v1.task:Task.score", "role": "verify", "optional": True, **VERIFY},
    ]
}

TARGETS: tuple[Target, ...] = parse_config(PRESET)
