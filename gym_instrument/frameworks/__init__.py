"""Frameworks: one folder per rollout framework, each a preset (a table of targets, as data) and a
schema (how the framework names and scores its rollouts, as code), and one table, :data:`FRAMEWORKS`.

A new framework is one preset file, one schema file (none when the preset declares every rule,
as inspect-ai's does) and one line in the table: the preset is
armed by default (each only when its framework is imported), its name is a preset name
(``OTEL_PYTHON_GYM_PRESETS``) and a schema name of the declarative form (``schema = "<name>"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gym_instrument.frameworks.inspect_ai import preset as inspect_ai_preset
from gym_instrument.frameworks.nemo_gym import preset as nemo_gym_preset
from gym_instrument.frameworks.nemo_gym import schema as nemo_gym_schema
from gym_instrument.frameworks.verifiers import preset as verifiers_preset
from gym_instrument.frameworks.verifiers import schema as verifiers_schema
from gym_instrument.schema.base import GENERIC, RolloutSchema


@dataclass(frozen=True)
class Framework:
    """A rollout framework the package knows: its targets (the declarative form) and its schema."""

    name: str
    preset: Mapping[str, Any]
    schema: RolloutSchema
    run_files: Any = None  # how a finished run lays out its files (for gym-instrument replay), if known


FRAMEWORKS: dict[str, Framework] = {
    framework.name: framework
    for framework in (
        Framework("nemo_gym", nemo_gym_preset.PRESET, nemo_gym_schema.SCHEMA, nemo_gym_schema.RUN_FILES),
        Framework("verifiers", verifiers_preset.PRESET, verifiers_schema.SCHEMA),
        Framework("inspect_ai", inspect_ai_preset.PRESET, GENERIC),  # all of it declared in the preset
    )
}

# The schema of a target that names none: a user's own loop, read by the common field names (a
# framework's preset names its own schema on every target).
DEFAULT_SCHEMA: RolloutSchema = GENERIC
