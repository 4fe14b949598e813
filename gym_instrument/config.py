"""Configuration: one frozen dataclass; ``instrument()`` arguments win over ``OTEL_PYTHON_GYM_*``
environment variables, which win over defaults — decided here and nowhere else.

A bad value passed in code raises ``ValueError``; a bad value in the environment is logged with
the variable's name and skipped, so the application still starts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from gym_instrument.job import JOB_LINK, JOB_MODES
from gym_instrument.targets import Target

_LOG = logging.getLogger("gym_instrument")

ENV_TARGETS = "OTEL_PYTHON_GYM_TARGETS"
ENV_PRESETS = "OTEL_PYTHON_GYM_PRESETS"
ENV_LINK_CAPACITY = "OTEL_PYTHON_GYM_LINK_CAPACITY"
ENV_BAGGAGE = "OTEL_PYTHON_GYM_BAGGAGE"
ENV_JOB_CONTEXT = "OTEL_PYTHON_GYM_JOB_CONTEXT"

DEFAULT_PRESETS = ("nemo_gym",)
DEFAULT_LINK_CAPACITY = 1_000_000


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_targets(value: str | Iterable[str | Target]) -> tuple[Target, ...]:
    items = _split(value) if isinstance(value, str) else list(value)
    return tuple(Target.parse(item) for item in items)


def parse_presets(value: str | Iterable[str]) -> tuple[str, ...]:
    from gym_instrument.presets import PRESETS

    names = _split(value) if isinstance(value, str) else [str(name).strip() for name in value]
    if [name.lower() for name in names] == ["none"] or not names:
        return ()
    unknown = [name for name in names if name not in PRESETS]
    if unknown:
        raise ValueError(f"unknown preset {', '.join(map(repr, unknown))}; known: {', '.join(sorted(PRESETS))}, none")
    return tuple(dict.fromkeys(names))


def parse_capacity(value: str | int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"link capacity must be a whole number >= 1, got {value!r}")
    try:
        capacity = int(value) if isinstance(value, (int, str)) else None
    except ValueError:
        capacity = None
    if capacity is None or capacity < 1:
        raise ValueError(f"link capacity must be a whole number >= 1, got {value!r}")
    return capacity


def parse_bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_job_mode(value: str) -> str:
    mode = str(value).strip().lower()
    if mode not in JOB_MODES:
        raise ValueError(f"job context must be one of {', '.join(JOB_MODES)}, got {value!r}")
    return mode


@dataclass(frozen=True)
class Setting:
    env: str
    parse: Callable[[Any], Any]


@dataclass(frozen=True)
class GymConfig:
    """Everything ``instrument()`` is configured with; each field knows its variable and default."""

    targets: tuple[Target, ...] = ()
    presets: tuple[str, ...] = DEFAULT_PRESETS
    link_capacity: int = DEFAULT_LINK_CAPACITY
    baggage: bool = True
    job_context: str = JOB_LINK

    SETTINGS: ClassVar[dict[str, Setting]] = {
        "targets": Setting(ENV_TARGETS, parse_targets),
        "presets": Setting(ENV_PRESETS, parse_presets),
        "link_capacity": Setting(ENV_LINK_CAPACITY, parse_capacity),
        "baggage": Setting(ENV_BAGGAGE, parse_bool),
        "job_context": Setting(ENV_JOB_CONTEXT, parse_job_mode),
    }

    @classmethod
    def resolve(cls, arguments: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> GymConfig:
        """Arguments (raise on bad values) > environment (log and skip bad values) > defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for spec in fields(cls):
            setting = cls.SETTINGS[spec.name]
            if arguments.get(spec.name) is not None:
                values[spec.name] = setting.parse(arguments[spec.name])
            elif environ.get(setting.env, "").strip():
                parsed = _from_environment(setting, environ[setting.env])
                if parsed is not None:
                    values[spec.name] = parsed
        return cls(**values)


def _from_environment(setting: Setting, raw: str) -> Any:
    if setting.parse is parse_targets:
        # One bad entry is skipped; the good ones still apply.
        targets = []
        for item in _split(raw):
            try:
                targets.append(Target.parse(item))
            except ValueError as error:
                _LOG.error("gym_instrument: %s: skipped %s", setting.env, error)
        return tuple(targets)
    try:
        return setting.parse(raw)
    except ValueError as error:
        _LOG.error("gym_instrument: %s=%r ignored: %s; using the default", setting.env, raw, error)
        return None
