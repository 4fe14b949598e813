"""Values that fight back: every dunder a reader might touch raises, lies or never ends.

Each raises ``HostileError`` whose message carries ``HOSTILE_SECRET``, so a test can also prove
that nothing a hostile object says ever reaches a span, a metric or a log line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

HOSTILE_SECRET = "hostile-secret-4f1c9e"


class HostileError(RuntimeError):
    pass


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise HostileError(f"do not log me: {HOSTILE_SECRET}")


class Hostile:
    """Marker base: the spec model treats a hostile value as unreadable (absent)."""

    def __repr__(self) -> str:
        return "<hostile>"


class RaisingGetattr(Hostile):
    """Every attribute read raises (pydantic-style ``__getattr__`` gone wrong)."""

    def __getattr__(self, name: str) -> Any:
        _boom()

    __getattribute__ = _boom  # type: ignore[assignment]


class RaisingEverything(Hostile):
    __getitem__ = _boom
    __iter__ = _boom
    __len__ = _boom
    __bool__ = _boom
    __eq__ = _boom  # type: ignore[assignment]
    __hash__ = object.__hash__
    __str__ = _boom
    __format__ = _boom
    __int__ = _boom
    __float__ = _boom
    __index__ = _boom
    __getattr__ = _boom


class RaisingDict(dict, Hostile):  # type: ignore[type-arg]
    """A dict whose every read raises, with real items underneath."""

    __getitem__ = _boom
    get = _boom
    items = _boom
    keys = _boom
    values = _boom
    __iter__ = _boom
    __len__ = _boom
    __contains__ = _boom


class RaisingMapping(Mapping, Hostile):  # type: ignore[type-arg]
    def __getitem__(self, key: Any) -> Any:
        _boom()

    def __iter__(self) -> Iterator[Any]:
        _boom()

    def __len__(self) -> int:
        _boom()
        return 0


class RaisingList(list, Hostile):  # type: ignore[type-arg]
    __iter__ = _boom
    __len__ = _boom
    __getitem__ = _boom


class HalfIterableList(list, Hostile):  # type: ignore[type-arg]
    """Yields its first item, then raises; indexing and len() raise."""

    def __iter__(self) -> Iterator[Any]:
        yield list.__getitem__(self, 0)
        _boom()

    __getitem__ = _boom
    __len__ = _boom


class RaisingStr(str):
    """A string whose str(), repr(), equality and hash raise; its characters are still there."""

    __str__ = _boom
    __repr__ = _boom
    __eq__ = _boom  # type: ignore[assignment]
    __hash__ = _boom  # type: ignore[assignment]
    __format__ = _boom


class LyingDict(Hostile):
    """Claims to be a dict (``isinstance`` says so) and is not one."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict


class EndlessIterator(Hostile):
    """An iterator that never ends: consuming it would hang the host."""

    def __iter__(self) -> EndlessIterator:
        return self

    def __next__(self) -> Any:
        return {"task_index": 0, "rollout_index": 0, "verdict": "healthy"}


class _Gone:
    pass


def dead_proxy() -> Any:
    """A weak proxy whose referent is gone: even ``isinstance`` on it raises ReferenceError."""
    import weakref

    return weakref.proxy(_Gone())


def self_referential_dict() -> dict[str, Any]:
    row: dict[str, Any] = {"name": "loop"}
    row["self"] = row
    row["list"] = [row, [row]]
    return row


def self_referential_list() -> list[Any]:
    items: list[Any] = [1]
    items.append(items)
    return items


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for level in range(depth):
        value = {f"k{level}": value}
    return value


def wide_dict(width: int) -> dict[str, int]:
    return {f"key{index:06d}": index for index in range(width)}


def hostile_exception_class() -> type[BaseException]:
    """An exception class whose module name is not valid UTF-8 and whose str() and repr() raise."""
    return type("HostileError", (Exception,), {"__str__": _boom, "__repr__": _boom, "__module__": "hostile\udcfe.module"})


HOSTILE_FACTORIES = (
    RaisingGetattr,
    RaisingEverything,
    lambda: RaisingDict({"task_id": "hidden", "_ng_task_index": 1, "reward": 1.0}),
    RaisingMapping,
    lambda: RaisingList([1, 2, 3]),
    lambda: HalfIterableList([{"check": "model_call_failed"}, {"check": "x"}]),
    LyingDict,
    EndlessIterator,
    dead_proxy,
)
