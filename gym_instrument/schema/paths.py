"""Field paths of the declarative form: ``row``, ``arg.NAME``, ``self``, ``result`` or ``item``
(one record of a health result, in ``verdicts``; one item of a batch's result, in ``batch``),
then ``.field``, ``[N]``, ``[i]`` and ``.*`` steps. Nothing is evaluated: a path that does not
resolve is MISSING.

``[i]`` is the item at the position of the batch item being read (``batch`` only): the entry of
a parallel list, such as a dataset column a reward function is given (``arg.task_id[i]``).

``.*`` is the first value of a mapping that is present (not None), in the mapping's order: a
score filed under its scorer's name (``row.scores.*.value``) is read without knowing the name."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gym_instrument.schema.fields import MISSING, field, is_a

_ROOT = re.compile(r"^(row|self|result|item|arg\.([A-Za-z_]\w*))")
_STEP = re.compile(r"\.([A-Za-z_]\w*)|\[(-?\d+)\]|\.(\*)|\[(i)\]")


class _FirstValue:
    """The ``.*`` step (one object, compared by identity)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FIRST_VALUE"


FIRST_VALUE: Any = _FirstValue()


class _Position:
    """The ``[i]`` step (one object, compared by identity)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "POSITION"


POSITION: Any = _Position()


class CallView(Protocol):
    """What a path reads of one call (the engine's ``Call`` is one)."""

    @property
    def row(self) -> Any: ...

    @property
    def instance(self) -> Any: ...

    @property
    def result(self) -> Any: ...

    def argument(self, name: str) -> Any: ...


class FieldPath:
    """A parsed path such as ``result.attempts[-1].failures[-1].kind``; read with :meth:`read`."""

    __slots__ = ("argument", "root", "step_texts", "steps", "text")

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise ValueError(f"a path must be a string, got {text!r}")
        match = _ROOT.match(text)
        if match is None:
            raise ValueError(f"path {text!r} must start with row, arg.NAME, self or result")
        steps: list[Any] = []
        step_texts: list[str] = []
        position = match.end()
        while position < len(text):
            step = _STEP.match(text, position)
            if step is None:
                raise ValueError(f"path {text!r}: expected .field, [N], [i] or .* at {text[position:]!r}")
            name, index, star, position_step = step.groups()
            if name is not None and name.startswith("__"):
                raise ValueError(f"path {text!r}: {name!r} is not readable (a name starting with __)")
            if position_step:
                steps.append(POSITION)
            else:
                steps.append(name if name is not None else FIRST_VALUE if star else int(index))
            step_texts.append(step.group(0))
            position = step.end()
        self.text = text
        self.root = match.group(1).partition(".")[0]
        self.argument = match.group(2)
        self.steps = tuple(steps)
        self.step_texts = tuple(step_texts)

    def _start(self, call: CallView) -> Any:
        root = self.root
        if root == "row":
            value = call.row
        elif root == "arg":
            value = call.argument(self.argument)
        elif root == "self":
            value = call.instance
        elif root == "result":
            value = call.result
        else:  # item: one record of a health result (a view that has one)
            value = getattr(call, "item", MISSING)
        return value

    @property
    def per_item(self) -> bool:
        """Whether it has an ``[i]`` step (read at a batch item's position)."""
        return POSITION in self.steps

    def read(self, call: CallView) -> Any:
        """The value at this path for one call, or MISSING."""
        value = self._start(call)
        for step in self.steps:
            if value is MISSING or value is None:
                return MISSING
            if type(step) is int:
                value = read_item(value, step)
            elif step is POSITION:
                value = read_item(value, getattr(call, "position", None))  # (no batch item: MISSING)
            else:
                value = first_value(value) if step is FIRST_VALUE else read_attribute(value, step)
        return value

    def resolved_part(self, call: CallView) -> str | None:
        """The longest beginning of this path that resolves for ``call`` (None: not even its root),
        for a message about a path that does not."""
        value = self._start(call)
        if value is MISSING or value is None:
            return None
        resolved = self.text[: len(self.text) - sum(map(len, self.step_texts))]
        for step, text in zip(self.steps, self.step_texts, strict=True):
            value = _read_step(value, step)
            if value is MISSING or value is None:
                break
            resolved += text
        return resolved

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPath) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"FieldPath({self.text!r})"


def _read_step(value: Any, step: Any) -> Any:
    if type(step) is int:
        return read_item(value, step)
    if step is POSITION:
        return read_item(value, 0)  # (a message's "how far it resolves": the first item)
    if step is FIRST_VALUE:
        return first_value(value)
    return read_attribute(value, step)


def first_value(value: Any) -> Any:
    """The first value of a mapping that is not None, in its order; else MISSING."""
    if not is_a(value, Mapping):
        return MISSING
    try:
        for item in value.values():
            if item is not None:
                return item
    except Exception:
        pass
    return MISSING


def read_attribute(value: Any, name: str) -> Any:
    """``value``'s field ``name`` (a mapping key, a pydantic field or extra, an attribute), else a
    property its class defines; MISSING when absent or unreadable."""
    found = field(value, name)
    if found is not MISSING or is_a(value, Mapping):
        return found
    # A property (a computed reward, say) is not a field: read it when the class defines one.
    try:
        if isinstance(inspect.getattr_static(type(value), name, None), property):
            return getattr(value, name)
    except Exception:
        pass
    return MISSING


def read_item(value: Any, index: Any) -> Any:
    """Item ``index`` of a list, a tuple or another sequence (not a string; negative from the end), else MISSING."""
    if type(index) is not int:
        return MISSING
    if not is_a(value, (list, tuple)) and (not is_a(value, Sequence) or is_a(value, (str, bytes, bytearray))):
        return MISSING
    try:
        return value[index] if -len(value) <= index < len(value) else MISSING
    except Exception:
        return MISSING
