"""Declared rules: extractors made from data (paths), never evaluated code.

An :class:`AttributeRules` reads each attribute from the first of its paths that has a value and
converts it by the SPEC rule of its name (``rules``); a :class:`FailureRule` marks a call that
returned as failed (``error.type``, the extractor convention of ``extractors``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gym_instrument import semconv
from gym_instrument.schema.fields import MISSING, rollout_id_string
from gym_instrument.schema.paths import CallView, FieldPath
from gym_instrument.schema.rules import convert


@dataclass(frozen=True)
class AttributeRules:
    """An extractor from data: each attribute from the first of its paths that has a value."""

    rules: tuple[tuple[str, tuple[FieldPath, ...]], ...]
    at_start: bool

    @property
    def __gym_at_start__(self) -> bool:  # read by extract.runs_at_start
        return self.at_start

    def __call__(self, call: CallView) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        for name, paths in self.rules:
            for path in paths:
                value = path.read(call)
                if value is MISSING or value is None:
                    continue
                converted = convert(name, value)
                if converted is not None:
                    attributes[name] = converted
                    break
        return attributes


@dataclass(frozen=True)
class FailureRule:
    """An extractor from data: ``error.type`` when the result says the call failed (see the module)."""

    when: FieldPath
    equals: Any
    error_type: tuple[FieldPath, ...]

    __gym_at_start__ = False

    def __call__(self, call: CallView) -> dict[str, Any] | None:
        value = self.when.read(call)
        if type(value) is not type(self.equals) or value != self.equals:
            return None
        for path in self.error_type:
            kind = rollout_id_string(path.read(call))
            if kind is not None:
                return {semconv.ERROR_TYPE: kind}
        return {semconv.ERROR_TYPE: semconv.ERROR_TYPE_OTHER}


@dataclass(frozen=True)
class AtStart:
    """An extractor named in ``start_extractors``: run before the span starts."""

    extractor: Callable[..., Any]

    __gym_at_start__ = True

    def __call__(self, call: CallView) -> Any:
        return self.extractor(call)
