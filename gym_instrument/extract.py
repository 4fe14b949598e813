"""Which attributes: plain callables that turn a call's row, request, result or verdict into attributes.

An extractor is any callable ``extractor(call) -> Mapping[str, value] | None``. It receives a
:class:`Call`: the bound arguments, the instance, the located row or request, and — when it runs
after the call — the result or the exception. By default an extractor runs after the call;
mark it with :func:`at_start` to run before the span starts, so that samplers see what it returns.
For the ``health`` role an extractor runs once per verdict, with ``call.verdict`` set.

Example::

    def dataset_name(call):
        return {"my.dataset": call.row["dataset"]} if call.row else None

    GymInstrumentor().instrument(extractors={"dispatch": [at_start(dataset_name)]})

The defaults below implement SPEC sections 2-4. They read ids, indices, numbers and verdict
names only: no prompt, response or other row content.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from opentelemetry import baggage, context

from gym_instrument import semconv
from gym_instrument.record import utf8_safe

# The rollout id when baggage is kept in-process only (OTEL_PYTHON_GYM_BAGGAGE=false): a plain
# context value, which no propagator writes into outgoing headers.
ROLLOUT_ID_CONTEXT_KEY = context.create_key(semconv.BAGGAGE_ROLLOUT_ID)

Attributes = Mapping[str, Any]
Extractor = Callable[["Call"], "Attributes | None"]
F = TypeVar("F", bound=Callable[..., Any])

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING", "__bool__": lambda self: False})()

_INT64_MAX = 2**63 - 1
_TASK_ID_FIELDS = ("task_id", "problem_id", "instance_id", "task_name")
_INDEX_FORM = re.compile(r"^(\d+)-(\d+)(?:-a(\d+))?$")
# A task id rendered from a mapping or a list is bounded: deeper levels and further items
# are cut, so a hostile or self-referential row cannot make it large or recurse forever.
_TASK_ID_MAX_DEPTH = 6
_TASK_ID_MAX_ITEMS = 64
_TASK_ID_MAX_CHARS = 1024


def at_start(extractor: F) -> F:
    """Mark an extractor to run before the span starts (its attributes reach the sampler)."""
    extractor.__gym_at_start__ = True  # type: ignore[attr-defined]
    return extractor


def runs_at_start(extractor: Callable[..., Any]) -> bool:
    return getattr(extractor, "__gym_at_start__", False) is True


def _trusted(extractor: F) -> F:
    """Mark a default extractor whose attributes are valid OTLP values by construction (not re-checked per call)."""
    extractor.__gym_trusted__ = True  # type: ignore[attr-defined]
    return extractor


def is_trusted(extractor: Callable[..., Any]) -> bool:
    return getattr(extractor, "__gym_trusted__", False) is True


class ArgLocator:
    """Where a call's row (or request) sits, found once from the signature when wrapping.

    The argument is looked up by name in the keywords, else by position: the position of the
    first candidate name among the parameters, else the first positional argument after self.
    """

    __slots__ = ("index_bound", "index_unbound", "names")

    def __init__(self, function: Callable[..., Any], names: Sequence[str], explicit: str | None = None) -> None:
        self.names: tuple[str, ...] = (explicit,) if explicit else tuple(names)
        try:
            params = inspect.signature(function, follow_wrapped=False).parameters.values()
            positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            positional = []
        index: int | None = next((positional.index(name) for name in self.names if name in positional), None)
        if index is None:
            # Not named: the first positional argument (wrapt passes args without a bound self/cls).
            self.index_unbound: int | None = None if explicit else 0
            self.index_bound: int | None = None if explicit else 0
        else:
            self.index_unbound = index
            self.index_bound = index - 1 if index >= 1 else None

    def find(self, instance: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The argument's value for one call, or MISSING."""
        if kwargs:
            for name in self.names:
                if name in kwargs:
                    return kwargs[name]
        index = self.index_unbound if instance is None else self.index_bound
        if index is not None and index < len(args):
            return args[index]
        return MISSING


class Call:
    """One call of a wrapped function, as extractors see it."""

    __slots__ = ("_binding", "_identity", "_row", "args", "exception", "instance", "kwargs", "result", "verdict")

    def __init__(self, binding: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # binding: what the call was wrapped for (its role name, target, function and ArgLocator).
        self._binding = binding
        self.instance = instance
        self.args = args
        self.kwargs = kwargs
        self.result: Any = MISSING
        self.exception: BaseException | None = None
        self.verdict: Any = MISSING
        self._row: Any = MISSING
        self._identity: RolloutIdentity | None = None

    @property
    def role(self) -> str:
        """``dispatch``, ``verify`` or ``health``."""
        return self._binding.role_name  # type: ignore[no-any-return]

    @property
    def target(self) -> Any:
        """The :class:`~gym_instrument.Target` the wrapped function was instrumented for."""
        return self._binding.target

    @property
    def function(self) -> Callable[..., Any]:
        """The original (unwrapped) function."""
        return self._binding.function  # type: ignore[no-any-return]

    @property
    def row(self) -> Any:
        """The dispatch row, or the verify/health request: the argument the target points at."""
        row = self._row
        if row is MISSING:
            found = self._binding.locator.find(self.instance, self.args, self.kwargs)
            row = self._row = None if found is MISSING else found
        return row

    @property
    def identity(self) -> RolloutIdentity:
        if self._identity is None:
            self._identity = rollout_identity(self.row)
        return self._identity

    @property
    def arguments(self) -> dict[str, Any]:
        """All arguments by parameter name (bound lazily: only extractors that ask pay for it)."""
        try:
            signature = inspect.signature(self._binding.function)
            bound = signature.bind_partial(*self.args, **self.kwargs)
        except (TypeError, ValueError):
            return dict(self.kwargs)
        return dict(bound.arguments)


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
            names = _MODEL_FIELDS.get(kind, _UNKNOWN)
            if names is _UNKNOWN:
                names = _model_fields(kind)
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


def task_id_of(row: Any) -> str | None:
    for name in _TASK_ID_FIELDS:
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


def rollout_identity(row: Any) -> RolloutIdentity:
    if row is None:
        return RolloutIdentity()
    task_index = rollout_index = None
    custom_id = False
    episode = field(row, "episode_id")
    if episode is not MISSING and episode is not None and not is_a(episode, (str, int)):
        # NeMo Gym's native episode body: {"episode_id": {"rollout_id", "attempt"}, "task": {"task_id", ...}}
        rollout_id = rollout_id_string(field(episode, "rollout_id"))
        attempt = index_value(field(episode, "attempt"))
        task = field(row, "task")
        task_id = None if task is MISSING else task_id_of(task)
        if rollout_id is not None:
            parsed = parse_index_form(rollout_id)
            if parsed is None:
                custom_id = True
            else:
                task_index, rollout_index, parsed_attempt = parsed
                if attempt is None:
                    attempt = parsed_attempt
    else:
        # A row parsed from JSON is a plain dict: read it directly (absent and None mean the same here).
        read = row.get if type(row) is dict else partial(field, row)
        task_id = task_id_of(row)
        task_index = index_value(read("_ng_task_index"))
        rollout_index = index_value(read("_ng_rollout_index"))
        attempt = index_value(read("_ng_attempt_index"))
        rollout_id = rollout_id_string(read("_ng_rollout_id"))
        if rollout_id is not None:
            custom_id = parse_index_form(rollout_id) is None
        elif task_index is not None and rollout_index is not None:
            rollout_id = index_form(task_index, rollout_index, attempt)
    agent = field(row, "agent_ref")
    agent_name = None if agent is MISSING or agent is None else rollout_id_string(field(agent, "name"))
    return RolloutIdentity(task_id, task_index, rollout_index, attempt, rollout_id, custom_id, agent_name)


# ---------------------------------------------------------------------------------------------
# Default extractors, one family per role.


@_trusted
@at_start
def dispatch_attributes(call: Call) -> dict[str, Any]:
    """SPEC section 2: task id, indices, rollout id and agent name from the dispatched row."""
    return identity_attributes(call.identity)


def identity_attributes(identity: RolloutIdentity) -> dict[str, Any]:
    """:func:`dispatch_attributes` of a row's identity."""
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


_REQUEST_ID_FIELDS = ("_ng_rollout_id", "capture_rollout_id", "_ng_task_index", "_ng_rollout_index")


def _model_lacks(request: Any, names: tuple[str, ...]) -> bool:
    """True when ``request`` is a pydantic model with none of ``names``: no field, computed field or extra."""
    try:
        model = type(request)
        fields = getattr(model, "__pydantic_fields__", None)
        if type(fields) is not dict:
            return False
        computed = getattr(model, "__pydantic_computed_fields__", None) or ()
        for name in names:
            if name in fields or name in computed:
                return False
        extra = request.__pydantic_extra__
        if extra is None:
            return True
        if type(extra) is not dict:
            return False
        for name in names:
            if name in extra:
                return False
        return True
    except Exception:
        return False


def request_rollout_id(request: Any) -> str | None:
    """The rollout id a verify request carries itself, when it does."""
    if request is None:
        return None
    if type(request) is not dict and _model_lacks(request, _REQUEST_ID_FIELDS):
        return None  # the flat-row path's request: looked up name by name it costs microseconds
    for name in ("_ng_rollout_id", "capture_rollout_id"):
        explicit = rollout_id_string(field(request, name))
        if explicit is not None:
            return explicit
    task_index = index_value(field(request, "_ng_task_index"))
    rollout_index = index_value(field(request, "_ng_rollout_index"))
    if task_index is None or rollout_index is None:
        return None
    return index_form(task_index, rollout_index, index_value(field(request, "_ng_attempt_index")))


@_trusted
@at_start
def verify_request_attributes(call: Call) -> dict[str, Any]:
    """SPEC section 3: the rollout id from the request, else from the propagated baggage."""
    return request_attributes(call.row, context.get_current())


def request_attributes(request: Any, current: context.Context) -> dict[str, Any]:
    """:func:`verify_request_attributes` of a request, in the context ``current``."""
    rollout_id = request_rollout_id(request)
    if rollout_id is None:
        rollout_id = rollout_id_string(baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current))
    if rollout_id is None:
        rollout_id = rollout_id_string(context.get_value(ROLLOUT_ID_CONTEXT_KEY, current))
    return {semconv.ROLLOUT_ID: rollout_id} if rollout_id is not None else {}


def reward_of(result: Any) -> float | None:
    """The reward when it is numeric (int or float, not bool), finite and not masked; else None."""
    if _is_number(result):
        value = result
    else:
        if field(result, "mask_sample") is True:
            return None
        value = field(result, "reward")
        if not _is_number(value):
            return None
    try:
        # float subclasses (numpy.float64) count; their own __float__ is not trusted
        reward = float.__float__(value) if issubclass(type(value), float) else int.__float__(value)
    except OverflowError:
        return None
    return reward if math.isfinite(reward) else None


def _is_number(value: Any) -> bool:
    kind = type(value)
    return kind is not bool and issubclass(kind, (int, float))


@_trusted
def verify_result_attributes(call: Call) -> dict[str, Any]:
    """SPEC section 3: reward (numeric, unmasked only), masked flag and failure kind."""
    return result_attributes(call.result)


def result_attributes(result: Any) -> dict[str, Any]:
    """:func:`verify_result_attributes` of a result (MISSING: the call raised)."""
    if result is MISSING:
        return {}
    attributes: dict[str, Any] = {}
    reward = reward_of(result)
    if reward is not None:
        attributes[semconv.ROLLOUT_REWARD] = reward
    if type(result) not in (int, float):
        masked = field(result, "mask_sample")
        if type(masked) is bool:
            attributes[semconv.VERIFY_MASKED] = masked
        failure_kind = rollout_id_string(field(result, "failure_kind"))
        if failure_kind is not None:
            attributes[semconv.FAILURE_KIND] = failure_kind
    return attributes


def _is_verdict(value: Any) -> bool:
    return any(field(value, name) is not MISSING for name in ("verdict", "rollout_id", "task_index", "_ng_task_index"))


def verdicts_of(result: Any) -> Sequence[Any]:
    """The verdicts in a health result: ``.rollouts`` / ``["rollouts"]``, a list of verdicts, or one verdict.

    One-shot iterators are never consumed: the host still needs them.
    """
    if is_a(result, (list, tuple)):
        return result
    rollouts = field(result, "rollouts")
    if is_a(rollouts, (list, tuple)):
        return rollouts
    if result is not None and _is_verdict(result):
        return (result,)
    return ()


def verdict_checks(verdict: Any) -> list[str]:
    """Sorted, distinct check ids of a verdict's findings."""
    return checks_of(field(verdict, "findings"))


def checks_of(findings: Any) -> list[str]:
    """Sorted, distinct check ids of a list of findings."""
    if not is_a(findings, (list, tuple)):
        return []
    checks = set()
    try:
        for finding in findings:
            check = field(finding, "check")
            if type(check) is not str or not check.isascii():
                check = rollout_id_string(check)
            if check:
                checks.add(check)
    except Exception:  # findings that cannot be read are no findings
        return []
    return sorted(checks)


@_trusted
def verdict_attributes(call: Call) -> dict[str, Any]:
    """SPEC section 4: the verdict name and the sorted distinct failed checks."""
    return verdict_attributes_of(call.verdict)


def verdict_attributes_of(verdict: Any) -> dict[str, Any]:
    """:func:`verdict_attributes` of one verdict."""
    attributes: dict[str, Any] = {semconv.HEALTH_CHECKS: verdict_checks(verdict)}
    name = plain_str(field(verdict, "verdict"))
    if name is not None:
        attributes[semconv.HEALTH_VERDICT] = utf8_safe(name)
    return attributes


_DIGEST_FIELDS = frozenset(("task_index", "rollout_index", "rollout_id", "verdict", "findings"))


def digests_facts(verdicts: Sequence[Any]) -> list[tuple[tuple[str | None, int, int], dict[str, Any]] | None]:
    """For each verdict, (:func:`verdict_identity`, :func:`verdict_attributes_of`) at once when it is NeMo
    Gym's ``RolloutDigest`` (a pydantic model with those fields, holding what they usually hold), read
    directly; else None (the general readers decide). One pass over a health result's verdicts."""
    facts: list[tuple[tuple[str | None, int, int], dict[str, Any]] | None] = []
    append = facts.append
    kind: Any = None
    is_digest = False
    for verdict in verdicts:
        try:
            if type(verdict) is not kind:  # a result's digests share their class: looked up once
                kind = type(verdict)
                names = _MODEL_FIELDS.get(kind, _UNKNOWN)
                if names is _UNKNOWN:
                    names = _model_fields(kind)
                is_digest = names is not None and _DIGEST_FIELDS <= names
            if not is_digest:
                append(None)
                continue
            task_index, rollout_index, rollout_id = verdict.task_index, verdict.rollout_index, verdict.rollout_id
            name, findings = verdict.verdict, verdict.findings
        except Exception:
            kind = None
            append(None)
            continue
        if (
            type(rollout_id) is str
            and rollout_id.isascii()
            and type(task_index) is int  # index_value(), for the two indices
            and 0 <= task_index <= _INT64_MAX
            and type(rollout_index) is int
            and 0 <= rollout_index <= _INT64_MAX
            and type(name) is str
            and name.isascii()
            and type(findings) is list
        ):
            append(
                (
                    (rollout_id or None, task_index, rollout_index),
                    {semconv.HEALTH_CHECKS: checks_of(findings) if findings else [], semconv.HEALTH_VERDICT: name},
                )
            )
        else:
            append(None)
    return facts


def verdict_identity(verdict: Any) -> tuple[str | None, int | None, int | None]:
    """A verdict's rollout id and (task index, rollout index); other index types match nothing."""
    task_index = field(verdict, "task_index")
    rollout_index = field(verdict, "rollout_index")
    if task_index is MISSING and rollout_index is MISSING:  # a rollout_verdicts.jsonl row
        task_index, rollout_index = field(verdict, "_ng_task_index"), field(verdict, "_ng_rollout_index")
    for value in (task_index, rollout_index):
        if value is not MISSING and value is not None and index_value(value) is None:
            return None, None, None  # not even through a bare "{task}-{rollout}" id beside them
    return rollout_id_string(field(verdict, "rollout_id")), index_value(task_index), index_value(rollout_index)


DEFAULT_EXTRACTORS: dict[str, tuple[Extractor, ...]] = {
    semconv.ROLE_DISPATCH: (dispatch_attributes,),
    semconv.ROLE_VERIFY: (verify_request_attributes, verify_result_attributes),
    semconv.ROLE_HEALTH: (verdict_attributes,),
    semconv.ROLE_ISOLATE: (),
}
