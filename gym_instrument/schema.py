"""How a rollout is named and scored, whatever the framework: identity, readers, attribute rules.

A :class:`RolloutSchema` says how one framework's dispatch rows, verify requests, verify results
and health verdicts carry the facts SPEC sections 2-4 put on spans: task id, indices, rollout id,
reward, mask, failure kind, verdict and checks. The engine (``roles``) reads through a schema
only and knows no framework's field names; a framework's schema sits beside its preset
(``presets/nemo_gym_schema.py``). What is the same for every framework lives here: the rollout
identity, the index form of a rollout id, the attribute rules, and field access that tolerates
mappings, pydantic models, plain objects and hostile ones.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from gym_instrument import semconv
from gym_instrument.record import utf8_safe

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()

_INT64_MAX = 2**63 - 1
_INDEX_FORM = re.compile(r"^(\d+)-(\d+)(?:-a(\d+))?$")
# A task id rendered from a mapping or a list is bounded: deeper levels and further items
# are cut, so a hostile or self-referential row cannot make it large or recurse forever.
_TASK_ID_MAX_DEPTH = 6
_TASK_ID_MAX_ITEMS = 64
_TASK_ID_MAX_CHARS = 1024


# ---------------------------------------------------------------------------------------------
# Field access that tolerates mappings, pydantic models, plain objects and hostile ones.


_UNKNOWN = object()
_MODEL_FIELDS: dict[type, frozenset[str] | None] = {}  # by type: a pydantic model's field names, else None


def _model_fields(kind: type) -> frozenset[str] | None:
    """A pydantic model class's declared and computed field names (None: not a plain model), cached per class."""
    names = _MODEL_FIELDS.get(kind, _UNKNOWN)
    if names is _UNKNOWN:
        names = None
        fields = getattr(kind, "__pydantic_fields__", None)
        if type(fields) is dict and not issubclass(kind, (str, bytes, int, float, Mapping)):
            computed = getattr(kind, "__pydantic_computed_fields__", None)
            names = frozenset(fields) | frozenset(computed if type(computed) is dict else ())
        if len(_MODEL_FIELDS) >= 1024:  # bounded, whatever classes a process makes
            _MODEL_FIELDS.clear()
        _MODEL_FIELDS[kind] = names
    return names  # type: ignore[return-value]


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` for a mapping, else ``obj.name`` (pydantic extras included); MISSING when absent or unreadable."""
    try:
        kind = type(obj)
        if kind is dict:
            return obj.get(name, MISSING)
        try:
            known = _MODEL_FIELDS.get(kind, _UNKNOWN)
            names = _model_fields(kind) if known is _UNKNOWN else cast("frozenset[str] | None", known)
        except Exception:  # a class that cannot be a dict key (a hostile metaclass): the general path
            names = None
        if names is not None:
            if name in names:
                return getattr(obj, name, MISSING)
            # A pydantic model without that field: its extras, if any. getattr() would take
            # pydantic's slow path for a missing name (several microseconds per lookup).
            extra = obj.__pydantic_extra__
            return extra.get(name, MISSING) if type(extra) is dict else MISSING
        if obj is None or isinstance(obj, (str, bytes, int, float)):
            return MISSING
        if isinstance(obj, Mapping):
            return obj.get(name, MISSING)
        model = type(obj)
        fields = getattr(model, "__pydantic_fields__", None)
        if type(fields) is dict and name not in fields and name not in getattr(model, "__pydantic_computed_fields__", ()):
            # A pydantic model without that field: its extras, if any. getattr() would take
            # pydantic's slow path for a missing name (several microseconds per lookup).
            extra = obj.__pydantic_extra__
            return extra.get(name, MISSING) if type(extra) is dict else MISSING
        value = getattr(obj, name, MISSING)
        if value is MISSING:
            extra = getattr(obj, "__pydantic_extra__", None)
            if type(extra) is dict:
                return extra.get(name, MISSING)
        return value
    except Exception:  # a hostile row must not cost the span: treat the field as absent
        return MISSING


def is_a(value: Any, types: type | tuple[type, ...]) -> bool:
    """``isinstance`` that a hostile value cannot break: a dead weak proxy, for one, raises from it."""
    try:
        return isinstance(value, types)
    except Exception:
        return False


def plain_str(value: Any) -> str | None:
    """The characters of a string (a subclass's too, whatever its ``__str__`` does); else None."""
    if type(value) is str:
        return value  # the usual case, and what str.__str__ returns for it
    if not is_a(value, str):
        return None
    try:
        return str.__str__(value)
    except TypeError:  # claims to be a string and is not one
        return None


def index_value(value: Any) -> int | None:
    """An int >= 0 that fits int64 (not a bool), else None."""
    if type(value) is int and 0 <= value <= _INT64_MAX:
        return value
    return None


def _bounded_plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        return "…"
    if value is None or type(value) in (bool, float):
        return value
    if type(value) is int:
        return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else "…"
    text = plain_str(value)
    if text is not None:
        return utf8_safe(text[:_TASK_ID_MAX_CHARS])
    if depth >= _TASK_ID_MAX_DEPTH:
        return "…"
    try:
        if is_a(value, Mapping):
            plain: dict[str, Any] = {}
            for index, (key, item) in enumerate(value.items()):
                if index >= _TASK_ID_MAX_ITEMS:
                    plain["…"] = "…"
                    break
                key_text = plain_str(key)
                if key_text is not None:
                    key = utf8_safe(key_text[:_TASK_ID_MAX_CHARS])
                elif type(key) in (int, float, bool) or key is None:
                    key = json.dumps(key)
                else:
                    continue
                plain[key] = _bounded_plain(item, depth + 1, budget)
            return plain
        if is_a(value, (list, tuple)):
            return [_bounded_plain(item, depth + 1, budget) for item in value[:_TASK_ID_MAX_ITEMS]]
    except Exception:
        if depth == 0:
            raise  # the task id itself cannot be read: the next field is tried
        return "…"  # a part that cannot be read is cut like a part that is too large
    return "…"


def render_task_id(value: Any) -> str | None:
    """A task id as a string: ``str()`` of a scalar, compact sorted JSON of a mapping or list."""
    if type(value) is bool or value is None:
        return None
    text = plain_str(value)
    if text is not None:
        return utf8_safe(text) if text else None
    if type(value) is int:
        try:
            return str(value)  # a string attribute: ids beyond int64 (uint64 hashes) are fine here
        except ValueError:  # more digits than the interpreter converts
            return None
    if type(value) is float:
        return repr(value)
    if is_a(value, (Mapping, list, tuple)):
        rendered = json.dumps(
            _bounded_plain(value, 0, [_TASK_ID_MAX_ITEMS * 4]), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return rendered if len(rendered) <= _TASK_ID_MAX_CHARS else rendered[: _TASK_ID_MAX_CHARS - 1] + "…"
    return None


def task_id_of(row: Any, names: Sequence[str]) -> str | None:
    """The first of the fields ``names`` of ``row`` that renders as a task id (:func:`render_task_id`)."""
    for name in names:
        value = field(row, name)
        if value is MISSING or value is None or type(value) is bool:
            continue
        if type(value) is str:  # the usual id: no rendering to do
            if value:
                return value if value.isascii() else utf8_safe(value)
            continue
        try:
            rendered = render_task_id(value)
        except Exception:  # a value that cannot be read is no id: the next field is tried
            continue
        if rendered is not None:
            return rendered
    return None


def rollout_id_string(value: Any) -> str | None:
    if value is None or value is MISSING:
        return None
    text = plain_str(value)
    return utf8_safe(text) if text else None


def index_form(task_index: int, rollout_index: int, attempt: int | None) -> str:
    if attempt:
        return f"{task_index}-{rollout_index}-a{attempt}"
    return f"{task_index}-{rollout_index}"


def parse_index_form(rollout_id: str) -> tuple[int, int, int | None] | None:
    """``"3-1"`` -> (3, 1, None); ``"3-1-a2"`` -> (3, 1, 2); anything else -> None."""
    match = _INDEX_FORM.match(rollout_id)
    if match is None:
        return None
    task_index, rollout_index, attempt = match.groups()
    parsed = int(task_index), int(rollout_index), None if attempt is None else int(attempt)
    if any(part is not None and part > _INT64_MAX for part in parsed):
        return None
    return parsed


class RolloutIdentity:
    """What names one rollout attempt: task id and indices from the row, and its rollout id."""

    __slots__ = ("agent_name", "attempt", "custom_id", "rollout_id", "rollout_index", "task_id", "task_index")

    def __init__(
        self,
        task_id: str | None = None,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
        rollout_id: str | None = None,
        custom_id: bool = False,  # an explicit id that is not the index form
        agent_name: str | None = None,
    ) -> None:
        self.task_id = task_id
        self.task_index = task_index
        self.rollout_index = rollout_index
        self.attempt = attempt
        self.rollout_id = rollout_id
        self.custom_id = custom_id
        self.agent_name = agent_name


def named_identity(identity: RolloutIdentity | None, rollout_id: str) -> RolloutIdentity:
    """``identity`` (or an empty one) named by ``rollout_id``: an extractor's rollout id at the start."""
    if identity is None:
        identity = RolloutIdentity()
    identity.rollout_id = rollout_id
    identity.custom_id = parse_index_form(rollout_id) is None
    return identity


# ---------------------------------------------------------------------------------------------
# The attribute rules (SPEC sections 2-4), one each, for every schema.


def identity_attributes(identity: RolloutIdentity) -> dict[str, Any]:
    """SPEC section 2: a dispatch span's task id, indices, rollout id and agent name."""
    attributes: dict[str, Any] = {}
    if identity.task_id is not None:
        attributes[semconv.TASK_ID] = identity.task_id
    if identity.rollout_index is not None:
        attributes[semconv.ROLLOUT_REPEAT] = identity.rollout_index
    if identity.task_index is not None:
        attributes[semconv.TASK_INDEX] = identity.task_index
    if identity.attempt is not None:
        attributes[semconv.ROLLOUT_ATTEMPT] = identity.attempt
    if identity.rollout_id is not None:
        attributes[semconv.ROLLOUT_ID] = identity.rollout_id
    if identity.agent_name is not None:
        attributes[semconv.AGENT_NAME] = identity.agent_name
    return attributes


def numeric_reward(value: Any) -> float | None:
    """A reward as a float when it is a number (int or float, not bool) and finite; else None."""
    kind = type(value)
    if kind is bool or not issubclass(kind, (int, float)):
        return None
    try:
        # float subclasses (numpy.float64) count; their own __float__ is not trusted
        reward = float.__float__(value) if issubclass(kind, float) else int.__float__(value)
    except OverflowError:
        return None
    return reward if math.isfinite(reward) else None


def outcome_attributes(reward: Any, masked: Any, failure_kind: Any) -> dict[str, Any]:
    """SPEC section 3: a verify span's reward (numeric, finite, unmasked only), masked flag and failure kind."""
    attributes: dict[str, Any] = {}
    if masked is not True:
        value = numeric_reward(reward)
        if value is not None:
            attributes[semconv.ROLLOUT_REWARD] = value
    if type(masked) is bool:
        attributes[semconv.VERIFY_MASKED] = masked
    kind = rollout_id_string(failure_kind)
    if kind is not None:
        attributes[semconv.FAILURE_KIND] = kind
    return attributes


def checks_of(findings: Any, check_field: str = "check") -> list[str]:
    """Sorted, distinct check ids of a list of findings."""
    if not is_a(findings, (list, tuple)):
        return []
    checks = set()
    try:
        for finding in findings:
            check = field(finding, check_field)
            if type(check) is not str or not check.isascii():
                check = rollout_id_string(check)
            if check:
                checks.add(check)
    except Exception:  # findings that cannot be read are no findings
        return []
    return sorted(checks)


def verdict_attributes(name: Any, checks: list[str]) -> dict[str, Any]:
    """SPEC section 4: a health span's verdict name and its sorted distinct failed checks."""
    attributes: dict[str, Any] = {semconv.HEALTH_CHECKS: checks}
    text = plain_str(name)
    if text is not None:
        attributes[semconv.HEALTH_VERDICT] = text if text.isascii() else utf8_safe(text)
    return attributes


# What names the dispatch a verdict belongs to: (rollout id, task index, rollout index), any may be None.
VerdictName = tuple["str | None", "int | None", "int | None"]
# A verdict as the health role reads it: its name and its span's attributes.
VerdictFacts = tuple[VerdictName, dict[str, Any]]


class RolloutSchema:
    """How one framework names and scores its rollouts; the engine reads through nothing else.

    A subclass, beside its framework's preset, overrides what its framework has. Every method
    tolerates any input (hostile objects included) and returns "nothing known" rather than raise;
    if one raises anyway, the engine logs it once and the span goes on without those attributes.
    """

    name = "generic"
    # Span names the framework's own telemetry gives the same calls: such a span, when the call runs
    # in it, gets the role's attributes instead of a second span of the same name under it.
    framework_spans: frozenset[str] = frozenset()

    def identity(self, row: Any) -> RolloutIdentity:
        """A dispatch row's identity: task id, indices, attempt, rollout id (from the row or its index form)."""
        return RolloutIdentity()

    def request_rollout_id(self, request: Any) -> str | None:
        """The rollout id a verify request carries itself, if any (else the engine uses the baggage)."""
        return None

    def result_attributes(self, result: Any) -> dict[str, Any]:
        """A verify result's attributes, through :func:`outcome_attributes`."""
        return outcome_attributes(result, None, None)

    def verdicts(self, result: Any) -> Sequence[Any]:
        """The verdicts in a health function's result (a one-shot iterator is never consumed)."""
        return ()

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        """For each verdict, what names its dispatch and its span's attributes (:func:`verdict_attributes`)."""
        return [((None, None, None), verdict_attributes(None, [])) for _ in verdicts]
