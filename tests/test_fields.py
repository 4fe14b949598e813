"""Field access (``schema/fields.py``): ``holds_any`` tells from a value's type that ``field`` would find
no value for any of some names, so that a reader of optional fields (a dispatch's token totals) costs one test
when they are absent, and never skips a field that ``field`` would find."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from gym_instrument.schema.fields import MISSING, field, holds_any
from tests.reliability.strategies import Model, RowMapping, anything, materialize

NAMES = ("response", "result", "ng_trajectory")


class Plain:
    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class Slotted:
    __slots__ = ("body", "status")

    def __init__(self) -> None:
        self.body, self.status = {}, 200


class WithResponse:
    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response = {"usage": {}}


class Computed:
    """Attributes computed on request: only reading tells."""

    def __getattr__(self, name: str) -> Any:
        if name == "result":
            return {"usage": {}}
        raise AttributeError(name)


class Property:
    @property
    def ng_trajectory(self) -> Any:
        return {"model_calls": []}


class Scored(BaseModel):
    reward: float = 0.0


class Strict(BaseModel):
    reward: float = 0.0
    response: Any = None


class Extras(BaseModel):
    model_config = ConfigDict(extra="allow")
    reward: float = 0.0


class Items(Mapping[str, Any]):
    def __init__(self, **values: Any) -> None:
        self.values = values

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def _with_instance_extra() -> Any:
    value = Plain()
    value.__pydantic_extra__ = {"result": {"usage": {}}}
    return value


SHAPES = [
    {"reward": 1.0},
    {"reward": 1.0, "response": {"usage": {}}},
    None,
    MISSING,
    "response",
    3,
    2.5,
    True,
    b"result",
    [1, 2],
    Plain(reward=1.0),
    Plain(result={"usage": {}}),
    _with_instance_extra(),
    Slotted(),
    WithResponse(),
    Computed(),
    Property(),
    Scored(),
    Strict(),
    Extras(),
    Extras(result={"usage": {}}),
    Extras(other=1),
    Items(reward=1.0),
    Items(result={}),
    RowMapping({"ng_trajectory": {}}),
    Model(a=1),
    Model(response={}),
]


def _found(value: Any, names: frozenset[str]) -> bool:
    return any(field(value, name) is not MISSING and field(value, name) is not None for name in names)


def test_it_says_none_only_where_field_finds_none_and_says_so_for_the_usual_results() -> None:
    names = frozenset(NAMES)
    for value in SHAPES:
        assert holds_any(value, names) or not _found(value, names), value
    # The usual results without any of them: told from their type and one set test.
    usual = ({"reward": 1.0}, None, MISSING, 3, "x", Plain(reward=1.0), Slotted(), Scored(), Strict(), Extras(other=1))
    for value in usual:
        assert not holds_any(value, names), value
    # A model's optional field left None holds nothing; one that holds a value is read.
    assert holds_any(Strict(response={"usage": {}}), names)


@settings(max_examples=400, deadline=None)
@given(value=anything, names=st.sets(st.sampled_from([*NAMES, "reward", "a", "task_id", "get", "keys"]), min_size=1))
def test_whatever_the_value_it_never_skips_a_field_that_field_would_find(value: Any, names: set[str]) -> None:
    value = materialize(value)
    wanted = frozenset(names)
    assert holds_any(value, wanted) or not _found(value, wanted)
