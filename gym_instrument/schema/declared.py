"""Declared rules: extractors made from data (paths), never evaluated code.

An :class:`AttributeRules` reads each attribute from the first of its paths that has a value,
adjusts it as its :class:`ValueRule` says (a value map, an integer offset) and converts it by the
SPEC rule of its name (``rules``); a :class:`FailureRule` marks a call that returned as failed
(``error.type``, the extractor convention of ``extractors``).

A rule none of whose paths resolves on the first :data:`WATCHED_CALLS` calls of its target is
logged once, naming the target, the rule and how far its paths resolve: a misspelled field is
otherwise silent. After those calls the rules are not watched (one test per call).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gym_instrument import semconv
from gym_instrument.schema.fields import MISSING, rollout_id_string
from gym_instrument.schema.paths import CallView, FieldPath
from gym_instrument.schema.rules import convert

_LOG = logging.getLogger("gym_instrument")
WATCHED_CALLS = 20  # calls of a target during which its rules' paths are watched


@dataclass(frozen=True)
class ValueRule:
    """One attribute's rule: its paths (the first that has a value wins) and what is done to the value.

    ``value_map``: a string value found in it (a bool as ``"true"``/``"false"``) is replaced by its
    entry; a string or bool not found becomes ``default`` when one is given (else the next path is
    tried); other values (numbers) are kept. ``offset``: added to an int value (not a bool), e.g.
    ``-1`` for a count that starts at 1. Both are data, applied before the attribute's SPEC rule.
    """

    paths: tuple[FieldPath, ...]
    value_map: Mapping[str, Any] | None = None
    default: Any = MISSING
    offset: int = 0

    def __hash__(self) -> int:  # the map is a dict: hashed by what else names the rule
        return hash((self.paths, self.offset))

    def adjust(self, value: Any) -> Any:
        """``value`` after the map and the offset; MISSING when the map has no entry and no default."""
        value_map = self.value_map
        if value_map is not None:
            kind = type(value)
            if kind is bool:
                key: Any = "true" if value else "false"
            elif kind is str:
                key = value
            else:
                key = MISSING
            if key is not MISSING:
                value = value_map.get(key, self.default)
        if self.offset and type(value) is int:
            value += self.offset
        return value


class _Watch:
    """The first calls of one target's rules: which rule has read a value yet."""

    __slots__ = ("calls", "lock", "silent")

    def __init__(self, rules: int) -> None:
        self.calls = 0
        self.silent = set(range(rules))  # rules none of whose paths has resolved yet
        self.lock = threading.Lock()


@dataclass(frozen=True)
class AttributeRules:
    """An extractor from data: each attribute from the first of its paths that has a value.

    ``where`` names the target (and the table, start or end) in the message about a rule that
    never reads anything (see the module)."""

    rules: tuple[tuple[str, ValueRule], ...]
    at_start: bool
    where: str = ""
    watch: _Watch | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.watch is None:
            object.__setattr__(self, "watch", _Watch(len(self.rules)))

    @property
    def __gym_at_start__(self) -> bool:  # read by extract.runs_at_start
        return self.at_start

    def __call__(self, call: CallView) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        watch = self.watch
        resolved: list[int] | None = [] if watch is not None and watch.silent else None
        for number, (name, rule) in enumerate(self.rules):
            for path in rule.paths:
                value = path.read(call)
                if value is MISSING or value is None:
                    continue
                if resolved is not None:
                    resolved.append(number)
                value = rule.adjust(value)
                if value is MISSING or value is None:
                    continue
                converted = convert(name, value)
                if converted is not None:
                    attributes[name] = converted
                    break
        if resolved is not None:
            self._watched(call, resolved)
        return attributes

    def _watched(self, call: CallView, resolved: list[int]) -> None:
        watch: _Watch = self.watch  # type: ignore[assignment]
        with watch.lock:
            if not watch.silent:
                return
            watch.silent.difference_update(resolved)
            watch.calls += 1
            if watch.calls < WATCHED_CALLS:
                return
            silent, watch.silent = sorted(watch.silent), set()
        for number in silent:
            name, rule = self.rules[number]
            reached = []
            for path in rule.paths:
                part = path.resolved_part(call)
                reached.append(f"{path.text!r} (" + (f"resolves up to {part!r})" if part else "nothing resolves)"))
            _LOG.warning(
                "gym_instrument: %s: rule %r read nothing in its first %d calls: %s; check the spelling of its path",
                self.where or "a declared rule",
                name,
                WATCHED_CALLS,
                ", ".join(reached),
            )


PRESENT: Any = type("Present", (), {"__repr__": lambda self: "PRESENT"})()
"""A :class:`FailureRule`'s ``equals`` when the rule fires for any value that is present and not None."""


@dataclass(frozen=True)
class FailureRule:
    """An extractor from data: ``error.type`` when the call says it failed (see the module): its
    ``when`` path has the value ``equals`` (same type), or, with ``equals`` :data:`PRESENT`, any
    value that is not None (an error recorded on the result)."""

    when: FieldPath
    equals: Any
    error_type: tuple[FieldPath, ...]

    __gym_at_start__ = False

    def __call__(self, call: CallView) -> dict[str, Any] | None:
        value = self.when.read(call)
        equals = self.equals
        if equals is PRESENT:
            if value is MISSING or value is None:
                return None
        elif type(value) is not type(equals) or value != equals:
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
