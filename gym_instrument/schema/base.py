"""The schema a framework describes its rollouts with; the engine reads through nothing else.

A :class:`RolloutSchema` says how one framework's dispatch rows, verify requests and results and
health verdicts carry the facts the spans need: task id, indices, rollout id, reward, mask,
failure kind, verdict and checks. A framework's own schema subclasses it, beside its preset
(``frameworks/<name>/schema.py``), and hands what it reads to the rules of ``schema.rules``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_instrument.link.identity import RolloutIdentity, index_form, parse_index_form
from gym_instrument.schema.fields import MISSING, field, index_value, is_a, rollout_id_string, task_id_of
from gym_instrument.schema.rules import (
    VerdictFacts,
    VerdictName,
    checks_of,
    model_call_name_attributes,
    numeric_reward,
    outcome_attributes,
    verdict_attributes,
)


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
    # A dispatch call without a row is a relay of a rollout already in flight, never a new dispatch
    # (else only when the context names a rollout).
    rowless_dispatch_relays = False
    # What its ``receive`` targets put in a request's ASGI scope to turn the server framework's own
    # telemetry off for it (the server_telemetry setting); empty: the framework has no such switch.
    quiet_server_scope: tuple[tuple[str, Any], ...] = ()
    # Whether its verdicts may name a rollout by task id and repeat alone (dispatches are then
    # remembered by those too: ``link.memory``'s ``by_task``).
    verdicts_name_tasks = False
    # A verify target's calls each score a batch of rollouts when its schema declares how (``declared.BatchRules``).
    batch: Any = None

    def identity(self, row: Any) -> RolloutIdentity:
        """A dispatch row's identity: task id, indices, attempt, rollout id (from the row or its index form)."""
        return RolloutIdentity()

    def request_rollout_id(self, request: Any) -> str | None:
        """The rollout id a verify request carries itself, if any (else the engine uses the baggage)."""
        return None

    def dispatch_end_attributes(self, row: Any, result: Any) -> dict[str, Any]:
        """A dispatch's attributes from what it returned (a framework that names the rollout only at
        the end, or returns failures as data: ``error.type`` marks the call failed). Default: none."""
        return {}

    def body_read_later(self, result: Any) -> bool:
        """Whether a dispatch returned a response whose body (the rollout's result, its token totals)
        the framework reads after the call returned: the dispatch span then ends when that body is
        read (a ``read_result`` target), or when the response is dropped unread. Default: never."""
        return False

    def model_call_request(self, request: Any) -> dict[str, Any]:
        """A model call's operation and requested model, from its request
        (:func:`~gym_instrument.schema.rules.model_call_name_attributes`); they name its span."""
        return model_call_name_attributes(None, None)

    def model_call_attributes(self, response: Any) -> dict[str, Any]:
        """A model call's answer: response model, token counts, finish reasons
        (:func:`~gym_instrument.schema.rules.model_call_result_attributes`). Default: none."""
        return {}

    def verify_attributes(self, request: Any, result: Any) -> dict[str, Any]:
        """A verify's attributes when it returns: reward, mask, failure kind (default: from the result)."""
        return self.result_attributes(result)

    def result_attributes(self, result: Any) -> dict[str, Any]:
        """A verify result's attributes, through :func:`~gym_instrument.schema.rules.outcome_attributes`."""
        return outcome_attributes(result, None, None)

    def run_files(self, config: Any) -> tuple[str | None, list[str]]:
        """What a run function's argument says of its files: the output file it writes (None:
        unknown) and the shard files it merges into that output (none: it merges nothing)."""
        return None, []

    def verdicts(self, result: Any) -> Sequence[Any]:
        """The verdicts in a health function's result (a one-shot iterator is never consumed)."""
        return ()

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        """For each verdict, what names its dispatch and its span's attributes (:func:`verdict_attributes`)."""
        return [((None, None, None), verdict_attributes(None, [])) for _ in verdicts]

    def batch_facts(self, call: Any, result: Any) -> list[tuple[VerdictName, dict[str, Any], Any]]:
        """For each item a call that scores a batch returned: what names its rollout, its verify
        span's attributes and the item (a schema that declares ``batch``). Default: none."""
        return []

    def batch_names(self, call: Any) -> list[VerdictName]:
        """What names each item's rollout of a batch, from the call's arguments alone (a call that
        raised: it returned no items). Default: nothing (no batch, or its names need the items)."""
        return []

    def unread_result(self, result: Any) -> str | None:
        """What a health result :meth:`verdicts` read nothing from is, for a message, when that is
        not a pass with nothing to judge (None: nothing to say; a framework knows its results)."""
        return None


def _first(row: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = field(row, name)
        if value is not MISSING and value is not None:
            return value
    return MISSING


class GenericSchema(RolloutSchema):
    """The common field names of a loop nobody wrote rules for, the schema of a target or decorator
    that names none: a row's ``task_id``, ``task_index``, ``repeat`` (else ``rollout_index``),
    ``attempt`` and ``rollout_id`` (else the index form of the two indices); a verify request's
    ``rollout_id``; a verify result that is a number, or its ``reward``; a health result that is a
    list of records (or has one as ``rollouts`` or ``verdicts``), each naming its rollout by
    ``rollout_id``, ``task_index`` + ``repeat`` or ``task_id`` + ``repeat`` (and ``attempt``), with
    a ``verdict`` (a bool: healthy/unhealthy) and ``checks`` (strings, or records with a ``check``
    or ``name``)."""

    name = "generic"
    verdicts_name_tasks = True

    def identity(self, row: Any) -> RolloutIdentity:
        if row is None or is_a(row, (str, bytes, int, float)):
            return RolloutIdentity()
        task_index = index_value(field(row, "task_index"))
        rollout_index = index_value(_first(row, _REPEAT_FIELDS))
        attempt = index_value(field(row, "attempt"))
        rollout_id = rollout_id_string(field(row, "rollout_id"))
        custom_id = False
        if rollout_id is not None:
            custom_id = parse_index_form(rollout_id) is None
        elif task_index is not None and rollout_index is not None:
            rollout_id = index_form(task_index, rollout_index, attempt)
        return RolloutIdentity(task_id_of(row, ("task_id",)), task_index, rollout_index, attempt, rollout_id, custom_id)

    def request_rollout_id(self, request: Any) -> str | None:
        if request is None or is_a(request, (str, bytes, int, float)):
            return None
        return rollout_id_string(field(request, "rollout_id"))

    def result_attributes(self, result: Any) -> dict[str, Any]:
        if numeric_reward(result) is not None:
            return outcome_attributes(result, None, None)
        if result is None or is_a(result, (str, bytes)):
            return {}
        return outcome_attributes(field(result, "reward"), None, None)

    def verdicts(self, result: Any) -> Sequence[Any]:
        if is_a(result, (list, tuple)):
            return result  # type: ignore[no-any-return]
        if result is None or is_a(result, (str, bytes)):
            return ()
        for name in ("rollouts", "verdicts"):
            records = field(result, name)
            if is_a(records, (list, tuple)):
                return records  # type: ignore[no-any-return]
        return (result,) if field(result, "verdict") is not MISSING else ()

    def unread_result(self, result: Any) -> str | None:
        if result is None or is_a(result, (list, tuple)) or self.verdicts(result):
            return None
        if any(is_a(field(result, name), (list, tuple)) for name in ("rollouts", "verdicts")):
            return None  # an empty list of records: nothing was judged
        if is_a(result, Mapping):
            return f"a {type(result).__name__} with keys {sorted(map(str, result))[:12]}"
        return f"a {type(result).__name__}"

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        facts: list[VerdictFacts] = []
        for record in verdicts:
            try:
                verdict = field(record, "verdict")
                if type(verdict) is bool:
                    verdict = "healthy" if verdict else "unhealthy"
                checks = field(record, "checks")
                names = checks_of(checks, None) or checks_of(checks, "check") or checks_of(checks, "name")
                name = (
                    rollout_id_string(field(record, "rollout_id")),
                    index_value(field(record, "task_index")),
                    index_value(_first(record, _REPEAT_FIELDS)),
                    task_id_of(record, ("task_id",)),
                    index_value(field(record, "attempt")),
                )
                facts.append((name, verdict_attributes(verdict, names)))
            except Exception:  # a record that cannot be read names no rollout
                facts.append(((None, None, None), verdict_attributes(None, [])))
        return facts


_REPEAT_FIELDS = ("repeat", "rollout_index")

GENERIC = GenericSchema()
"""The schema of a target or decorator that names none (and of ``schema = "generic"``): the common
field names above; declared rules and extractors add to it or replace it."""
