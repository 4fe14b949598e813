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
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.fields import MISSING, rollout_id_string
from gym_instrument.schema.paths import CallView, FieldPath
from gym_instrument.schema.rules import (
    VerdictFacts,
    VerdictName,
    checks_of,
    convert,
    names_a_rollout,
    verdict_attributes,
    without_masked_reward,
)

_LOG = logging.getLogger("gym_instrument")
WATCHED_CALLS = 20  # calls of a target during which its rules' paths are watched


# One vocabulary for a rollout's facts in every table of the declarative form (``start``, ``end``,
# ``verdicts``): the short name a user writes and the span attribute (SPEC's name) it stands for.
SHORT_NAMES = {
    "task_id": semconv.TASK_ID,
    "task_index": semconv.TASK_INDEX,
    "repeat": semconv.ROLLOUT_REPEAT,
    "attempt": semconv.ROLLOUT_ATTEMPT,
    "rollout_id": semconv.ROLLOUT_ID,
    "agent_name": semconv.AGENT_NAME,
    "reward": semconv.ROLLOUT_REWARD,
    "masked": semconv.VERIFY_MASKED,
    "failure_kind": semconv.FAILURE_KIND,
    "error_type": semconv.ERROR_TYPE,
}
# A template's short names: the identity attributes of the same table (or verdict record).
TEMPLATE_NAMES = {name: SHORT_NAMES[name] for name in ("task_id", "task_index", "repeat", "attempt")}
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


class Template:
    """A value composed of several: ``"{task_id}-{repeat}"``. A placeholder is a short name of
    :data:`TEMPLATE_NAMES` (that attribute as the same rules read it) or a path; the value is
    absent when any placeholder has no string or int value."""

    __slots__ = ("parts", "text")

    def __init__(self, text: Any) -> None:
        if not isinstance(text, str) or not text:
            raise ValueError(f"template: expected a non-empty string, got {text!r}")
        parts: list[Any] = []
        position = 0
        for match in _PLACEHOLDER.finditer(text):
            parts.append(text[position : match.start()])
            name = match.group(1).strip()
            parts.append(TEMPLATE_NAMES[name] if name in TEMPLATE_NAMES else FieldPath(name))
            position = match.end()
        parts.append(text[position:])
        if len(parts) == 1:
            raise ValueError(f"template {text!r} has no {{placeholder}}; expected e.g. '{{task_id}}-{{repeat}}'")
        if any("{" in part or "}" in part for part in parts[0::2]):
            raise ValueError(f"template {text!r}: unbalanced braces")
        self.text = text
        self.parts = tuple(parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    def render(self, call: CallView, attributes: Mapping[str, Any]) -> Any:
        """The composed string, or MISSING when a placeholder has no value."""
        pieces = []
        for number, part in enumerate(self.parts):
            if not number & 1:
                pieces.append(part)
                continue
            value = part.read(call) if isinstance(part, FieldPath) else attributes.get(part, MISSING)
            kind = type(value)
            if kind is str and value:
                pieces.append(value)
            elif kind is int:
                pieces.append(str(value))
            else:
                return MISSING
        return "".join(pieces)


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
    template: Template | None = None  # instead of paths: a value composed of several (read last)

    def __hash__(self) -> int:  # the map is a dict: hashed by what else names the rule
        return hash((self.paths, self.offset, self.template))

    def read(self, call: CallView, attributes: Mapping[str, Any]) -> Any:
        """The rule's value for one call, before its SPEC conversion: the first path that has one
        (after the map and the offset), or the template; MISSING when none has."""
        if self.template is not None:
            return self.template.render(call, attributes)
        for path in self.paths:
            value = path.read(call)
            if value is MISSING or value is None:
                continue
            value = self.adjust(value)
            if value is not MISSING and value is not None:
                return value
        return MISSING

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
            if rule.template is not None:  # (templates come last: they read the attributes above)
                value = rule.template.render(call, attributes)
                if value is not MISSING:
                    if resolved is not None:
                        resolved.append(number)
                    converted = convert(name, value)
                    if converted is not None:
                        attributes[name] = converted
                continue
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
            reached = [f"template {rule.template.text!r} (a placeholder had no value)"] if rule.template else []
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


def start_names(extractors: Sequence[Any]) -> set[str]:
    """The attributes a target's declared start rules read."""
    read: set[str] = set()
    for extractor in extractors:
        if isinstance(extractor, AttributeRules) and extractor.at_start:
            read.update(name for name, _ in extractor.rules)
    return read


def names_its_rollout(extractors: Sequence[Any]) -> bool:
    """Whether a target's declared start rules name the rollout its calls belong to: a rollout id
    (a path or a template), or a task (its index or its id) and a repeat."""
    read = start_names(extractors)
    return semconv.ROLLOUT_ID in read or (semconv.ROLLOUT_REPEAT in read and bool(read & {semconv.TASK_INDEX, semconv.TASK_ID}))


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


@dataclass(frozen=True)
class Constant:
    """An extractor from data: the same attributes on every span of its target, at the start
    (``reward_rule`` of a verify target)."""

    attributes: tuple[tuple[str, Any], ...]

    __gym_at_start__ = True

    def __call__(self, call: CallView) -> dict[str, Any]:
        return dict(self.attributes)


class _RecordView:
    """What a verdict record's paths read: ``item`` is the record (``result`` the health result)."""

    __slots__ = ("item", "result")

    row = None
    instance = None

    def __init__(self, item: Any, result: Any) -> None:
        self.item = item
        self.result = result

    def argument(self, name: str) -> Any:
        return MISSING


# The attributes that name a verdict's rollout, in the order they are read (a template last).
VERDICT_NAME_KEYS = {name: SHORT_NAMES[name] for name in ("task_id", "task_index", "repeat", "attempt", "rollout_id")}


class _Keyed:
    """A record of a mapping ``id -> record``: its key names its rollout unless a rule says otherwise."""

    __slots__ = ("key", "record")

    def __init__(self, key: Any, record: Any) -> None:
        self.key = key
        self.record = record


@dataclass(frozen=True)
class VerdictRules:
    """What a health function's result is, declared (``verdicts`` of a health target): where its
    records are (``items``: a path to a list of records or a mapping id -> record; None: the result
    itself), what in each names its rollout (rollout id, or task index + repeat, a template of them
    included), its verdict (a rule, a map included) and its checks (a path to a list of strings, or
    of records with ``check_field``). A result or record that yields no verdict is logged once."""

    items: FieldPath | None
    names: tuple[tuple[str, ValueRule], ...]
    verdict: ValueRule
    checks: ValueRule | None
    check_field: str | None
    where: str
    warned: set[str] = field(default_factory=set, compare=False, repr=False)

    def _warn(self, what: str, message: str, *args: Any) -> None:
        if what in self.warned:
            return
        self.warned.add(what)
        _LOG.warning("gym_instrument: %s: verdicts: " + message, self.where, *args)

    def records(self, result: Any) -> list[Any]:
        """The records of a health result (a mapping's as :class:`_Keyed`); none, once logged, when
        ``items`` finds no list or mapping."""
        value = result if self.items is None else self.items.read(_RecordView(MISSING, result))
        if isinstance(value, (list, tuple)):
            return [*value]
        if isinstance(value, Mapping):
            return [_Keyed(key, record) for key, record in value.items()]
        self._warn(
            "records",
            "%r is %s, not a list of records or a mapping id -> record; no health span is made",
            self.items.text if self.items is not None else "the result",
            "absent" if value is MISSING else type(value).__name__,
        )
        return []

    def facts(self, records: Sequence[Any]) -> list[VerdictFacts]:
        """For each record, what names its dispatch and its health span's attributes."""
        facts: list[VerdictFacts] = []
        for record in records:
            key = None
            if isinstance(record, _Keyed):
                key, record = record.key, record.record
            view = _RecordView(record, MISSING)
            read: dict[str, Any] = {}
            try:
                for attribute, rule in self.names:
                    value = convert(attribute, rule.read(view, read))
                    if value is not None:
                        read[attribute] = value
                verdict = self.verdict.read(view, read)
                if type(verdict) is bool:
                    verdict = "healthy" if verdict else "unhealthy"
                checks: list[str] = []
                if self.checks is not None:
                    checks = checks_of(self.checks.read(view, read), self.check_field)
            except Exception:
                verdict, checks = MISSING, []
            rollout_id = read.get(semconv.ROLLOUT_ID)
            if rollout_id is None and key is not None:
                rollout_id = rollout_id_string(key) if not isinstance(key, int) else None
            name = (
                rollout_id,
                read.get(semconv.TASK_INDEX),
                read.get(semconv.ROLLOUT_REPEAT),
                read.get(semconv.TASK_ID),
                read.get(semconv.ROLLOUT_ATTEMPT),
            )
            if verdict is MISSING or verdict is None:
                self._warn("verdict", "a record has no verdict (%s): %s", self.verdict_text, _shape(record))
            elif not names_a_rollout(name):
                self._warn(
                    "name",
                    "a record names no rollout (no rollout id, task index + repeat or task id + repeat): %s",
                    _shape(record),
                )
            facts.append((name, verdict_attributes(verdict, checks)))
        return facts

    @property
    def verdict_text(self) -> str:
        return ", ".join(path.text for path in self.verdict.paths)


def _shape(record: Any) -> str:
    """What a record holds, for a message: its type and its keys (never its values)."""
    if isinstance(record, Mapping):
        return f"a {type(record).__name__} with keys {sorted(map(str, record))[:12]}"
    return f"a {type(record).__name__}"


class DeclaredVerdictSchema(RolloutSchema):
    """A health target's schema with its verdicts declared (``verdicts`` in the declarative form):
    everything else is read by ``base``."""

    def __init__(self, base: RolloutSchema, rules: VerdictRules) -> None:
        self.base = base
        self.rules = rules
        self.name = base.name
        self.framework_spans = base.framework_spans
        self.verdicts_name_tasks = any(attribute == semconv.TASK_ID for attribute, _ in rules.names)

    def identity(self, row: Any) -> RolloutIdentity:
        return self.base.identity(row)

    def request_rollout_id(self, request: Any) -> str | None:
        return self.base.request_rollout_id(request)

    def verify_attributes(self, request: Any, result: Any) -> dict[str, Any]:
        return self.base.verify_attributes(request, result)

    def run_files(self, config: Any) -> tuple[str | None, list[str]]:
        return self.base.run_files(config)

    def verdicts(self, result: Any) -> Sequence[Any]:
        return self.rules.records(result)

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        return self.rules.facts(verdicts)


class _ItemView:
    """What a batch item's paths read: the call's arguments (``arg.NAME[i]`` at the item's
    ``position``; each argument looked up once per call), the call's result, and ``item``, the
    item itself. One view per call, moved from item to item."""

    __slots__ = ("arguments", "call", "item", "position", "result")

    def __init__(self, call: CallView, item: Any, position: int, result: Any) -> None:
        self.call = call
        self.item = item
        self.position = position
        self.result = result
        self.arguments: dict[str, Any] = {}

    @property
    def row(self) -> Any:
        return self.call.row

    @property
    def instance(self) -> Any:
        return self.call.instance

    def argument(self, name: str) -> Any:
        arguments = self.arguments
        if name not in arguments:
            arguments[name] = self.call.argument(name)
        return arguments[name]


# A batch item's outcome by its short name: the verify span's reward, mask and failure kind.
BATCH_OUTCOME_KEYS = {name: SHORT_NAMES[name] for name in ("reward", "masked", "failure_kind")}
BatchFacts = tuple[VerdictName, dict[str, Any], Any]  # (what names its rollout, its span's attributes, the item)


@dataclass(frozen=True)
class BatchRules:
    """What one call that scores many rollouts is, declared (``batch`` of a verify target): where
    its items are (``items``: a path to a list; None: the result itself), what names each item's
    rollout (a rollout id, or a task index or id and a repeat, read from the item or from parallel
    lists of the call's arguments at the item's position, ``arg.task_id[i]``) and its outcome
    (``reward``, ``masked``, ``failure_kind``; none declared: the base schema reads each item as a
    verify result, a number or its ``reward``). A result in which ``items`` finds no list is logged
    once."""

    items: FieldPath | None
    names: tuple[tuple[str, ValueRule], ...]
    outcome: tuple[tuple[str, ValueRule], ...]
    where: str
    warned: set[str] = field(default_factory=set, compare=False, repr=False)

    def facts(self, call: CallView, result: Any, base: RolloutSchema) -> list[BatchFacts]:
        """For each item of the result: what names its rollout and its verify span's attributes."""
        value = result if self.items is None else self.items.read(_ItemView(call, MISSING, 0, result))
        if not isinstance(value, (list, tuple)):
            if "items" not in self.warned:
                self.warned.add("items")
                _LOG.warning(
                    "gym_instrument: %s: batch: %r is %s, not a list of scores; no verify span is made",
                    self.where,
                    self.items.text if self.items is not None else "the result",
                    "absent" if value is MISSING else type(value).__name__,
                )
            return []
        facts: list[BatchFacts] = []
        view = _ItemView(call, MISSING, 0, result)
        for position, item in enumerate(value):
            view.item, view.position = item, position
            read: dict[str, Any] = {}
            for attribute, rule in (*self.names, *self.outcome):
                converted = convert(attribute, rule.read(view, read))
                if converted is not None:
                    read[attribute] = converted
            if not self.outcome:
                read.update(base.result_attributes(item))
            name = _name_of(read)
            attributes = without_masked_reward({key: read[key] for key in _OUTCOME_ATTRIBUTES if key in read})
            if name[0] is not None:
                attributes[semconv.ROLLOUT_ID] = name[0]
            facts.append((name, attributes, item))
        return facts

    def names_from_arguments(self, call: CallView) -> list[VerdictName]:
        """What names each item's rollout, read from the call's arguments alone (a call that raised
        returned no items): position by position, until a position names no rollout (at most
        :data:`BATCH_LIMIT`). None when a name is read from the item or the result."""
        if any(path.root in ("item", "result") for _, rule in self.names for path in _rule_paths(rule)):
            return []
        view = _ItemView(call, MISSING, 0, MISSING)
        names: list[VerdictName] = []
        for position in range(BATCH_LIMIT):
            view.position = position
            read: dict[str, Any] = {}
            for attribute, rule in self.names:
                converted = convert(attribute, rule.read(view, read))
                if converted is not None:
                    read[attribute] = converted
            name = _name_of(read)
            if not names_a_rollout(name):
                break
            names.append(name)
        return names


BATCH_LIMIT = 1 << 20  # items of a batch named from its arguments at most


def _rule_paths(rule: ValueRule) -> list[FieldPath]:
    """A rule's paths, a template's placeholders included."""
    placeholders = [part for part in rule.template.parts[1::2] if isinstance(part, FieldPath)] if rule.template else []
    return [*rule.paths, *placeholders]


def _name_of(read: Mapping[str, Any]) -> VerdictName:
    return (
        read.get(semconv.ROLLOUT_ID),
        read.get(semconv.TASK_INDEX),
        read.get(semconv.ROLLOUT_REPEAT),
        read.get(semconv.TASK_ID),
        read.get(semconv.ROLLOUT_ATTEMPT),
    )


_OUTCOME_ATTRIBUTES = (semconv.ROLLOUT_REWARD, semconv.VERIFY_MASKED, semconv.FAILURE_KIND)


class DeclaredBatchSchema(RolloutSchema):
    """A verify target's schema with its batch declared (``batch`` in the declarative form): one call
    scores many rollouts; everything else is read by ``base``."""

    def __init__(self, base: RolloutSchema, rules: BatchRules) -> None:
        self.base = base
        self.rules = rules
        self.batch = rules
        self.name = base.name
        self.framework_spans = base.framework_spans

    def identity(self, row: Any) -> RolloutIdentity:
        return self.base.identity(row)

    def request_rollout_id(self, request: Any) -> str | None:
        return self.base.request_rollout_id(request)

    def result_attributes(self, result: Any) -> dict[str, Any]:
        return self.base.result_attributes(result)

    def batch_facts(self, call: CallView, result: Any) -> list[BatchFacts]:
        return self.rules.facts(call, result, self.base)

    def batch_names(self, call: CallView) -> list[VerdictName]:
        return self.rules.names_from_arguments(call)
