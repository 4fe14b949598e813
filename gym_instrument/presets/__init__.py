"""Presets: named tables of targets for a framework, in the declarative form. Data, not code paths of their own."""

from __future__ import annotations

from gym_instrument.presets import nemo_gym, verifiers
from gym_instrument.targets import Target

PRESETS: dict[str, tuple[Target, ...]] = {
    "nemo_gym": nemo_gym.TARGETS,
    "verifiers": verifiers.TARGETS,
}
