"""Field access that tolerates mappings, pydantic models, plain objects and hostile ones, and the
value rules every framework shares: a task id rendered as a string, an index, a rollout id."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gym_instrument.record.attributes import INT64_MAX as _INT64_MAX
from gym_instrument.record.attributes import utf8_safe

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()

# A task id rendered from a mapping or a list is bounded: deeper levels and further items
# are cut, so a hostile or self-referential row cannot make it large or recurse forever.
_TASK_ID_MAX_DEPTH = 6
_TASK_ID_MAX_ITEMS = 64
_TASK_ID_MAX_CHARS = 1024

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
        if obj is MISSING or obj is None:  # a field of an absent field (a path read step by step)
            return MISSING
        try:
            known: Any = _MODEL_FIELDS.get(kind, _UNKNOWN)  # (typed Any, not cast(): a call per field read)
            names = _model_fields(kind) if known is _UNKNOWN else known
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


# By type, what field() reads on its instances, for holds_any(): _NO_FIELDS (None and the scalars:
# nothing), the attribute names its class gives them when reading an attribute is plain (no
# __getattr__ or __getattribute__ of its own, not a mapping, not pydantic-like), else None (an
# instance is read field by field).
_NO_FIELDS: Any = object()
_CLASS_NAMES: dict[type, Any] = {}


def _class_names(kind: type) -> Any:
    names = _CLASS_NAMES.get(kind, _UNKNOWN)
    if names is _UNKNOWN:
        names = None
        try:
            if issubclass(kind, (str, bytes, int, float)) or kind is type(None):
                names = _NO_FIELDS
            elif (
                not issubclass(kind, Mapping)
                and kind.__getattribute__ is object.__getattribute__
                and not hasattr(kind, "__getattr__")
            ):
                names = frozenset(dir(kind))
                if "__pydantic_extra__" in names or "__pydantic_fields__" in names:
                    names = None
        except Exception:  # a class that cannot be looked at: its instances are read field by field
            names = None
        if len(_CLASS_NAMES) >= 1024:  # bounded, whatever classes a process makes
            _CLASS_NAMES.clear()
        _CLASS_NAMES[kind] = names
    return names


def holds_any(obj: Any, names: frozenset[str]) -> bool:
    """Whether :func:`field` can find a value (not None) for any of ``names`` on ``obj``: False only
    when it finds none, known from ``obj``'s type and one set test (a dict's keys, a pydantic
    model's fields and extras, a plain object's class and instance attributes); True when that
    cannot be told so (a mapping of another kind, an object that computes its attributes), and
    then the fields are read.

    A reader of several optional fields asks this first, so that a result without any of them
    costs one test instead of a lookup per field."""
    kind = type(obj)
    if kind is dict:
        return not obj.keys().isdisjoint(names)
    if obj is MISSING:
        return False
    try:
        known: Any = _MODEL_FIELDS.get(kind, _UNKNOWN)
        fields = _model_fields(kind) if known is _UNKNOWN else known
        if fields is not None:
            for name in names:
                if name in fields and getattr(obj, name, None) is not None:  # (an optional field left None is none)
                    return True
            extra = obj.__pydantic_extra__
            return extra is not None and (type(extra) is not dict or not extra.keys().isdisjoint(names))
        attributes = _class_names(kind)
        if attributes is _NO_FIELDS:
            return False
        if attributes is None or not names.isdisjoint(attributes):
            return True
        instance = getattr(obj, "__dict__", None)
        if instance is None:
            return False
        # (field() looks in a __pydantic_extra__ of the instance's too)
        return type(instance) is not dict or "__pydantic_extra__" in instance or not instance.keys().isdisjoint(names)
    except Exception:  # a hostile object: read field by field, where each read is guarded
        return True


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


def model_field_names(kind: type) -> frozenset[str] | None:
    """A pydantic model class's field and computed field names, or None for any other class (cached per class)."""
    known: Any = _MODEL_FIELDS.get(kind, _UNKNOWN)
    return _model_fields(kind) if known is _UNKNOWN else known
