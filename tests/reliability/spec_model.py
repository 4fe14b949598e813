"""The SPEC's rules written again from its text, independently of the package: what a user
must see on the exported spans for a given row, request, result or verdict.

Unreadable values (hostile objects, dead proxies) count as absent. ``BOUNDED`` means "a
rendering of a large or unusual mapping or list": any valid UTF-8 string within the bound.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .hostile import Hostile

INT64_MAX = 2**63 - 1
TASK_ID_FIELDS = ("task_id", "problem_id", "instance_id", "task_name")
# A rendered mapping or list task id never exceeds this many characters.
RENDER_BOUND = 1024


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ABSENT = _Sentinel("ABSENT")
BOUNDED = _Sentinel("BOUNDED")


def unreadable(value: Any) -> bool:
    kind = type(value)
    return issubclass(kind, Hostile) or kind in (weakref.ProxyType, weakref.CallableProxyType)


def readable_str(value: Any) -> str | None:
    """The characters of a string (or str subclass), whatever its dunders do; else None."""
    return str.__str__(value) if issubclass(type(value), str) else None


def small_json(value: Any, depth: int = 0, budget: list[int] | None = None) -> bool:
    """Plain JSON small enough that its rendering is exactly ``json.dumps`` (no cut anywhere)."""
    budget = [60] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0 or depth > 4:
        return False
    kind = type(value)
    if value is None or kind in (bool, float):
        return True
    if kind is int:
        return -INT64_MAX - 1 <= value <= INT64_MAX
    if kind is str:
        return len(value) <= 32 and _utf8(value)
    if kind in (list, tuple):
        return len(value) <= 16 and all(small_json(item, depth + 1, budget) for item in value)
    if kind is dict:
        return (
            len(value) <= 16
            and all(type(key) is str and len(key) <= 32 and _utf8(key) for key in value)
            and all(small_json(item, depth + 1, budget) for item in value.values())
        )
    return False


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def task_id_render(value: Any) -> Any:
    """SPEC 2: what one task-id field renders to: a string, BOUNDED, or ABSENT (skipped)."""
    kind = type(value)
    if value is None or kind is bool or unreadable(value):
        return ABSENT
    text = readable_str(value)
    if text is not None:
        return text or ABSENT
    if kind is int:
        try:
            return str(value)
        except ValueError:  # more digits than the interpreter will print
            return ABSENT
    if kind is float:
        return str(value)
    if kind in (dict, list, tuple):
        if small_json(value):
            rendered = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            return rendered if len(rendered) <= RENDER_BOUND else BOUNDED
        return BOUNDED
    return ABSENT


def task_id(fields: dict[str, Any]) -> Any:
    for name in TASK_ID_FIELDS:
        if name in fields:
            rendered = task_id_render(fields[name])
            if rendered is not ABSENT:
                return rendered
    return ABSENT


def index(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value <= INT64_MAX else None


def id_string(value: Any) -> str | None:
    text = readable_str(value)
    return text if text else None


def index_form(task_index: int, rollout_index: int, attempt: int | None) -> str:
    return f"{task_index}-{rollout_index}-a{attempt}" if attempt else f"{task_index}-{rollout_index}"


def read(container: Any, name: str) -> Any:
    """A field of a generated container, ABSENT when missing or unreadable (spec view)."""
    if unreadable(container) or container is None or container is ABSENT:
        return ABSENT
    if isinstance(container, Mapping):
        try:
            return container[name] if name in container else ABSENT
        except Exception:  # a guarded field
            return ABSENT
    if issubclass(type(container), (str, bytes, int, float)):
        return ABSENT
    else:
        value = getattr(container, name, ABSENT)
        if value is ABSENT:
            value = (getattr(container, "__pydantic_extra__", None) or {}).get(name, ABSENT)
    return value


@dataclass
class Expected:
    attributes: dict[str, Any] = field(default_factory=dict)


def dispatch_attributes(row: dict[str, Any], unreadable_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """SPEC 2 for a flat row given as its readable fields."""
    fields = {name: value for name, value in row.items() if name not in unreadable_fields}
    expected: dict[str, Any] = {}
    rendered = task_id(fields)
    if rendered is not ABSENT:
        expected["nemo.gym.task.id"] = rendered
    task_index = index(fields.get("_ng_task_index"))
    rollout_index = index(fields.get("_ng_rollout_index"))
    attempt = index(fields.get("_ng_attempt_index"))
    if rollout_index is not None:
        expected["nemo.gym.rollout.repeat"] = rollout_index
    if task_index is not None:
        expected["nemo.gym.task.index"] = task_index
    if attempt is not None:
        expected["nemo.gym.rollout.attempt"] = attempt
    explicit = id_string(fields.get("_ng_rollout_id"))
    if explicit is not None:
        expected["nemo.gym.rollout.id"] = explicit
    elif task_index is not None and rollout_index is not None:
        expected["nemo.gym.rollout.id"] = index_form(task_index, rollout_index, attempt)
    agent = fields.get("agent_ref", ABSENT)
    name = id_string(read(agent, "name"))
    if name is not None:
        expected["nemo.gym.agent.name"] = name
    return expected


def verify_rollout_id(request: Any, baggage_value: str | None) -> str | None:
    """SPEC 3: the request's own id, else its indices, else the baggage entry."""
    for name in ("_ng_rollout_id", "capture_rollout_id"):
        explicit = id_string(read(request, name))
        if explicit is not None:
            return explicit
    task_index, rollout_index = index(read(request, "_ng_task_index")), index(read(request, "_ng_rollout_index"))
    if task_index is not None and rollout_index is not None:
        return index_form(task_index, rollout_index, index(read(request, "_ng_attempt_index")))
    return baggage_value or None


def reward(result: Any) -> float | None:
    """SPEC 3: numeric (int or float, not bool), finite, unmasked."""
    kind = type(result)
    if kind is not bool and issubclass(kind, (int, float)) and not unreadable(result):
        value = result
    else:
        if read(result, "mask_sample") is True:
            return None
        value = read(result, "reward")
        kind = type(value)
        if kind is bool or not issubclass(kind, (int, float)):
            return None
    try:
        number = float.__float__(value) if isinstance(value, float) else int.__float__(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def verify_result_attributes(result: Any) -> dict[str, Any]:
    expected: dict[str, Any] = {}
    value = reward(result)
    if value is not None:
        expected["nemo.gym.rollout.reward"] = value
    kind = type(result)
    if not (kind is not bool and issubclass(kind, (int, float))):
        masked = read(result, "mask_sample")
        if type(masked) is bool:
            expected["nemo.gym.verify.masked"] = masked
        failure_kind = id_string(read(result, "failure_kind"))
        if failure_kind is not None:
            expected["nemo.gym.failure_kind"] = failure_kind
    return expected


def checks(verdict: Any) -> list[str]:
    """SPEC 4: sorted, distinct check ids of the findings; empty when there are none (or unreadable)."""
    findings = read(verdict, "findings")
    if type(findings) not in (list, tuple):
        return []
    found = set()
    for finding in findings:
        check = id_string(read(finding, "check"))
        if check is not None:
            found.add(check)
    return sorted(found)


_INDEX_FORM = re.compile(r"^(\d+)-(\d+)(?:-a(\d+))?$")


@dataclass
class Dispatched:
    """One traced dispatch as the spec names it."""

    position: int  # which dispatch span (in call order)
    task_index: int | None
    rollout_index: int | None
    attempt: int
    rollout_id: str
    custom: bool


class LinkModel:
    """SPEC 4's matching rules: explicit id, else latest attempt of the indices; consumed once."""

    def __init__(self) -> None:
        self.alive: list[Dispatched] = []

    def dispatched(self, dispatch: Dispatched) -> None:
        def replaced(other: Dispatched) -> bool:
            same_indices = dispatch.task_index is not None and (other.task_index, other.rollout_index) == (
                dispatch.task_index,
                dispatch.rollout_index,
            )
            return same_indices or (dispatch.custom and other.custom and other.rollout_id == dispatch.rollout_id)

        self.alive = [other for other in self.alive if not replaced(other)]
        self.alive.append(dispatch)

    def take(self, rollout_id: Any, task_index: Any, rollout_index: Any) -> Dispatched | None:
        def present(value: Any) -> bool:
            return value is not ABSENT and value is not None

        if (present(task_index) and index(task_index) is None) or (present(rollout_index) and index(rollout_index) is None):
            return None  # other index types match nothing
        rollout_id = id_string(rollout_id)
        task_index, rollout_index = index(task_index), index(rollout_index)
        match = _INDEX_FORM.match(rollout_id) if rollout_id is not None else None
        if rollout_id is not None and (match is None or match.group(3) is not None):
            found = [d for d in self.alive if d.rollout_id == rollout_id]  # explicit: that id only
        else:
            if match is not None:
                parsed = int(match.group(1)), int(match.group(2))
                if task_index is None or rollout_index is None:
                    task_index, rollout_index = parsed
                elif (task_index, rollout_index) != parsed:
                    return None
            if task_index is None or rollout_index is None:
                return None
            found = [d for d in self.alive if (d.task_index, d.rollout_index) == (task_index, rollout_index)]
        if not found:
            return None
        self.alive.remove(found[0])
        return found[0]
