"""Hypothesis strategies: rows, requests, results and verdicts from arbitrary JSON-like values,
pydantic models, plain objects, hostile objects, self-referential and huge structures."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from . import hostile

INT64_MAX = 2**63 - 1
CANARY = "canary-7d2a51"


class Model(BaseModel):
    """A pydantic model that keeps whatever it is given (NeMo Gym's models allow extras)."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)


class RowMapping(Mapping):  # type: ignore[type-arg]
    """A read-only mapping that is not a dict; names in ``unreadable`` raise when read."""

    def __init__(self, fields: dict[str, Any], unreadable: frozenset[str] = frozenset()) -> None:
        self._fields = fields
        self._unreadable = unreadable

    def __getitem__(self, key: str) -> Any:
        if key in self._unreadable:
            raise hostile.HostileError(f"field {key} unreadable: {hostile.HOSTILE_SECRET}")
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


class RowDict(dict):  # type: ignore[type-arg]
    pass


class NumpyLikeFloat(float):
    """What ``numpy.float64`` is to Python: a float subclass."""


def describe(value: Any, depth: int = 0) -> str:
    """A repr that hostile values cannot break, for Hypothesis's report of a failing example."""
    if issubclass(type(value), (hostile.Hostile, str)) and type(value) is not str:
        return f"<{type(value).__name__}>"
    if type(value) is str:
        return repr(value if len(value) <= 40 else value[:40] + f"…({len(value)} chars)")
    if type(value) is int:
        return repr(value) if value.bit_length() < 200 else f"<int of {value.bit_length()} bits>"
    if depth > 2:
        return f"<{type(value).__name__}>"
    if type(value) is dict:
        items = list(value.items())
        shown = ", ".join(f"{describe(key, depth + 1)}: {describe(item, depth + 1)}" for key, item in items[:8])
        return "{" + shown + (", …" if len(items) > 8 else "") + "}"
    if type(value) in (list, tuple):
        shown = ", ".join(describe(item, depth + 1) for item in value[:8])
        return f"{type(value).__name__}[{shown}{', …' if len(value) > 8 else ''}]"
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:80] + "…"


class Shown:
    """Mixin: Hypothesis prints a failing example through :func:`describe`."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class Given(Shown):
    """A generated value in a box, so that Hypothesis never touches it to print it."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Given({describe(self.value)})"


class Outcome(tuple, Shown):  # type: ignore[type-arg]
    """("return", value) or ("raise", exception): what the wrapped function is told to do."""

    def __repr__(self) -> str:
        return f"Outcome({self[0]}, {describe(self[1])})"


CONTAINERS = ("dict", "dict_subclass", "mapping", "pydantic", "namespace", "guarded")


def contain(fields: dict[str, Any], kind: str, unreadable: frozenset[str] = frozenset()) -> Any:
    """The same fields as a dict, a dict subclass, a Mapping, a pydantic model or a plain object."""
    if kind == "dict":
        return dict(fields)
    if kind == "dict_subclass":
        return RowDict(fields)
    if kind == "mapping":
        return RowMapping(fields)
    if kind == "pydantic":
        return Model(**fields)
    if kind == "namespace":
        return SimpleNamespace(**fields)
    if kind == "guarded":
        return RowMapping(fields, unreadable)
    raise ValueError(kind)


# -- values -------------------------------------------------------------------------------------

plain_text = st.text(max_size=12)
any_chars_text = st.text(st.characters(exclude_categories=()), min_size=1, max_size=12)  # lone surrogates too
huge_text = st.integers(5_000, 200_000).map(lambda size: "λ" * size)
texts = st.one_of(plain_text, any_chars_text, huge_text, plain_text.map(hostile.RaisingStr), st.just(""))

ints = st.one_of(
    st.integers(-10, 10**6),
    st.sampled_from([0, INT64_MAX, INT64_MAX + 1, 2**64, -(2**63) - 1, 10**30]),
    st.just(5000).map(lambda digits: 10**digits),  # too many digits for str()
)
floats = st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308]))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), INT64_MAX), st.floats(), st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)

big_structures = st.sampled_from(
    [
        hostile.self_referential_dict,
        hostile.self_referential_list,
        lambda: hostile.deep_list(50_000),
        lambda: hostile.deep_dict(5_000),
        lambda: hostile.wide_dict(50_000),
        lambda: {1: "a", None: 2, (1, 2): 3, 1.5: 4, False: 5, "k\udcff": "v\ud800"},
        lambda: ["λ" * 100_000 for _ in range(50)],
        lambda: {"taskset": "mcqa", "nested": [hostile.RaisingGetattr(), hostile.RaisingDict({"a": 1}), hostile.dead_proxy()]},
        lambda: {"n": 10**5000, "big": 2**64, "f": math.inf},  # noqa: RUF100
    ]
).map(lambda factory: factory())


class Make:
    """A hostile value not made yet: Hypothesis itself calls isinstance() on what a strategy maps
    to, which a hostile value answers by raising; composites make them with :func:`materialize`."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __repr__(self) -> str:
        return f"Make({getattr(self.factory, '__name__', 'hostile')})"


def materialize(value: Any, depth: int = 0) -> Any:
    """Replace every :class:`Make` (top level and inside plain containers) with its hostile value."""
    kind = type(value)
    if kind is Make:
        return value.factory()
    if depth >= 3:
        return value
    if kind is dict:
        return {key: materialize(item, depth + 1) for key, item in value.items()}
    if kind is list:
        return [materialize(item, depth + 1) for item in value]
    if kind is tuple:
        return tuple(materialize(item, depth + 1) for item in value)
    return value


hostiles = st.sampled_from([Make(factory) for factory in hostile.HOSTILE_FACTORIES])

models = st.dictionaries(st.sampled_from(["a", "task_id", "reward", "name"]), json_scalars, max_size=3).map(
    lambda kw: Model(**kw)
)

anything = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    floats,
    texts,
    json_values,
    big_structures,
    hostiles,
    models,
    st.builds(SimpleNamespace, name=plain_text),
)

index_values = st.one_of(
    st.integers(0, 40),
    st.integers(-3, -1),
    st.sampled_from([INT64_MAX, INT64_MAX + 1, 2**64]),
    st.booleans(),
    st.floats(0, 10),
    st.sampled_from(["3", "0"]),
    st.none(),
    hostiles,
)

custom_ids = st.from_regex(r"\Ar-[a-z]{1,8}\Z")
index_form_ids = st.builds(lambda t, r: f"{t}-{r}", st.integers(0, 40), st.integers(0, 40))
rollout_id_values = st.one_of(custom_ids, index_form_ids, texts, st.none(), ints, hostiles)

agent_refs = st.one_of(
    st.builds(lambda name: {"name": name}, st.one_of(plain_text, any_chars_text, st.integers(), st.none(), hostiles)),
    st.builds(SimpleNamespace, name=plain_text),
    st.none(),
    hostiles,
    plain_text,
)

task_id_values = st.one_of(texts, ints, floats, st.booleans(), st.none(), json_values, big_structures, hostiles, models)

# Row content the package must never capture.
content_fields = st.fixed_dictionaries(
    {},
    optional={
        "responses_create_params": st.just({"input": [{"role": "user", "content": f"prompt {CANARY}"}]}),
        "prompt": st.just(f"prompt {CANARY}"),
        "api_key": st.just(f"sk-{CANARY}"),
        "uuid": st.just(f"uuid-{CANARY}"),
        "notes": anything,
    },
)

flat_row_fields = st.fixed_dictionaries(
    {},
    optional={
        "task_id": task_id_values,
        "problem_id": task_id_values,
        "instance_id": task_id_values,
        "task_name": task_id_values,
        "_ng_task_index": index_values,
        "_ng_rollout_index": index_values,
        "_ng_attempt_index": index_values,
        "_ng_rollout_id": rollout_id_values,
        "agent_ref": agent_refs,
    },
)


@dataclass(repr=False)
class Row(Shown):
    """A generated row, the container it arrives in, and which of its fields cannot be read."""

    fields: dict[str, Any]
    container: str
    unreadable: frozenset[str]

    def build(self) -> Any:
        return contain(self.fields, self.container, self.unreadable)

    def __repr__(self) -> str:
        return f"Row({describe(self.fields)}, container={self.container!r}, unreadable={sorted(self.unreadable)})"


@st.composite
def flat_rows(draw: st.DrawFn) -> Row:
    fields = materialize({**draw(content_fields), **draw(flat_row_fields)})
    container = draw(st.sampled_from(CONTAINERS))
    unreadable = (
        frozenset(draw(st.sets(st.sampled_from(sorted(fields)), max_size=3)))
        if container == "guarded" and fields
        else frozenset()
    )
    return Row(fields, container, unreadable)


@dataclass(repr=False)
class NativeEpisode(Shown):
    body: dict[str, Any]
    rollout_id: str | None
    task_id: Any  # the task's task_id value

    def __repr__(self) -> str:
        return f"NativeEpisode({self.rollout_id!r}, task_id={describe(self.task_id)})"


@st.composite
def native_episodes(draw: st.DrawFn) -> NativeEpisode:
    rollout_id = draw(st.one_of(custom_ids, index_form_ids))
    task_id = draw(st.one_of(json_values, big_structures, texts))
    episode = {"rollout_id": rollout_id, "attempt": draw(st.integers(0, 3))}
    body = {"episode_id": episode, "task": {"task_id": task_id, "task_input": {"prompt": f"{CANARY}"}}}
    return NativeEpisode(body, rollout_id, task_id)


# -- outcomes: what the wrapped function returns or raises ----------------------------------------


class Weird(Exception):
    pass


def _exceptions() -> st.SearchStrategy[BaseException]:
    return st.one_of(
        st.builds(ValueError, any_chars_text),
        st.builds(lambda key: KeyError(materialize(key)), st.one_of(plain_text, hostiles)),
        st.builds(Weird, huge_text),
        st.just(None).map(lambda _: hostile.hostile_exception_class()()),
        st.just(None).map(lambda _: asyncio.CancelledError()),
        st.just(None).map(lambda _: KeyboardInterrupt()),
        st.builds(RuntimeError, plain_text),
    )


exceptions = _exceptions()


@st.composite
def outcomes(draw: st.DrawFn, returns: st.SearchStrategy[Any] = anything) -> Outcome:
    if draw(st.integers(0, 4)) == 0:
        return Outcome(("raise", draw(exceptions)))
    return Outcome(("return", materialize(draw(returns))))


# -- verify: requests and results ------------------------------------------------------------------

reward_values = st.one_of(
    st.integers(-5, 5),
    st.floats(),
    st.sampled_from([math.nan, math.inf, -math.inf, 10**400, 2**64, True, False, "1.0", None]),
    st.floats(-1, 1).map(NumpyLikeFloat),
    hostiles,
)

result_fields = st.fixed_dictionaries(
    {},
    optional={
        "reward": reward_values,
        "mask_sample": st.one_of(st.booleans(), st.sampled_from([1, 0, "true", None]), hostiles),
        "failure_kind": st.one_of(plain_text, any_chars_text, st.none(), st.integers(), hostiles),
        "failure_reason": st.just(f"judge said {CANARY}"),
        "response": st.just({"output_text": f"answer {CANARY}"}),
    },
)


@st.composite
def verify_results(draw: st.DrawFn) -> Any:
    choice = draw(st.integers(0, 5))
    if choice == 0:
        return materialize(draw(reward_values))  # a bare number (or not)
    if choice == 1:
        return materialize(draw(st.one_of(hostiles, st.none(), anything)))
    container = draw(st.sampled_from(("dict", "dict_subclass", "mapping", "pydantic", "namespace")))
    return contain(materialize(draw(result_fields)), container)


request_fields = st.fixed_dictionaries(
    {"responses_create_params": st.just({"input": f"{CANARY}"})},
    optional={
        "_ng_rollout_id": rollout_id_values,
        "capture_rollout_id": rollout_id_values,
        "_ng_task_index": index_values,
        "_ng_rollout_index": index_values,
        "_ng_attempt_index": index_values,
    },
)


@st.composite
def verify_requests(draw: st.DrawFn) -> Given:
    if draw(st.integers(0, 6)) == 0:
        return Given(materialize(draw(st.one_of(hostiles, st.none()))))
    container = draw(st.sampled_from(("dict", "mapping", "pydantic", "namespace")))
    return Given(contain(materialize(draw(request_fields)), container))


# -- health: verdicts -------------------------------------------------------------------------------

check_ids = st.one_of(
    st.sampled_from(["model_call_failed", "agent_turn_hollow", "rollout_token_count_mismatch", "record_unreadable"]),
    plain_text,
)


@st.composite
def findings(draw: st.DrawFn) -> Any:
    items = []
    for _ in range(draw(st.integers(0, 5))):
        check = materialize(draw(st.one_of(check_ids, check_ids, st.none(), st.integers(), hostiles)))
        kind = draw(st.sampled_from(("dict", "namespace", "pydantic", "hostile")))
        if kind == "hostile":
            items.append(materialize(draw(hostiles)))
        else:
            items.append(contain({"check": check, "detail": {"message": f"{CANARY}"}}, kind))
    shape = draw(st.sampled_from(("list", "tuple", "none", "hostile_list", "half_list")))
    if shape == "tuple":
        return tuple(items)
    if shape == "none":
        return None
    if shape == "hostile_list":
        return hostile.RaisingList(items)
    if shape == "half_list":
        return hostile.HalfIterableList(items or [{"check": "x"}])
    return items
