"""``verify``: one span around each scoring of a rollout, with its reward.

A verify called inside its rollout's dispatch (the context names the rollout) is a child of what
it runs in. Two shapes of the role, each chosen by what its target declares (``for_target``),
join verifies called after their dispatch ended (generate every rollout, then score them):
:class:`VerifyAfterRole`, a target whose start rules name the rollout (a rollout id, or a task and
a repeat), and :class:`BatchVerifyRole`, a target whose ``batch`` says how one call scores many
rollouts. Each makes its span a child of the ended dispatch span, found the way a health verdict
finds it (:func:`dispatch_parent`), but kept for the next verify and for the health pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from time import time_ns
from typing import Any, cast

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span

from gym_instrument import semconv
from gym_instrument.compat import SPAN_KEY, parents_in
from gym_instrument.link.files import RUN_OUTPUT_KEY
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.link.memory import RolloutName
from gym_instrument.record.job import JobContext
from gym_instrument.record.spans import end_span
from gym_instrument.role.base import CallInFlight, LinkedCall, Role, RoleCall, rollout_id_in
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.declared import names_its_rollout, start_names
from gym_instrument.schema.fields import MISSING, index_value, rollout_id_string
from gym_instrument.schema.rules import VerdictName, names_a_rollout, without_masked_reward

_LOG = logging.getLogger("gym_instrument")


class VerifyRole(Role):
    name = semconv.ROLE_VERIFY
    span_name = semconv.SPAN_VERIFY
    row_names = ("body", "request")

    def for_target(self, schema: RolloutSchema | None, extractors: Sequence[Any]) -> Role:
        if schema is not None and schema.batch is not None:
            return VERIFY_BATCH
        return VERIFY_AFTER if names_its_rollout(extractors) else self

    def start_attributes(self, call: RoleCall, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        if not call.defaults:
            return {}, None
        # The rollout id the request carries, else the one propagated in baggage.
        rollout_id = call.schema.request_rollout_id(row)
        if rollout_id is None:
            rollout_id = rollout_id_in(current)
        return ({semconv.ROLLOUT_ID: rollout_id} if rollout_id is not None else {}), None

    def on_success(self, call: RoleCall, row: Any, result: Any) -> dict[str, Any]:
        # Whatever a schema reads (a user's own included), a masked verify has no reward; what the
        # end extractors and declared rules add is held to the same rule (run_extractors).
        return without_masked_reward(call.schema.verify_attributes(row, result))

    def on_end(self, call: RoleCall, flight: CallInFlight, attributes: dict[str, Any] | None) -> None:
        # gym.rollout.rewarded_total counts rollouts, not verifies: a multi-step rollout's later
        # rewarded steps are not counted again. Its rollout: the one its end names, else the one its
        # span started with (a verify after its dispatch is named as its span opens).
        if flight.ok and attributes and semconv.ROLLOUT_REWARD in attributes:
            flight.count_rewarded(attributes.get(semconv.ROLLOUT_ID, flight.start_attributes.get(semconv.ROLLOUT_ID)))


def rollout_name(attributes: dict[str, Any]) -> VerdictName:
    """What a verify's start attributes name its rollout by: (rollout id, task index, repeat, task
    id, attempt), as a verdict names it."""
    task_id = attributes.get(semconv.TASK_ID)
    return (
        rollout_id_string(attributes.get(semconv.ROLLOUT_ID)),
        index_value(attributes.get(semconv.TASK_INDEX)),
        index_value(attributes.get(semconv.ROLLOUT_REPEAT)),
        task_id if type(task_id) is str else None,
        index_value(attributes.get(semconv.ROLLOUT_ATTEMPT)),
    )


def _named(name: tuple[Any, ...]) -> str:
    """A rollout name as a message shows it: the parts it has."""
    labels = ("rollout id", "task index", "repeat", "task id", "attempt")
    return ", ".join(f"{label} {part!r}" for label, part in zip(labels, name, strict=False) if part is not None)


class VerifyAfterRole(VerifyRole):
    """A verify whose target names its rollout (declared start rules): called where no rollout is
    in context (its dispatch has ended), its span is a child of that rollout's ended dispatch span,
    in its trace, with the dispatch's rollout id; a rollout found nowhere is reported once per
    target, with the id looked for, and the verify stays a span of its own."""

    uses_links = True  # its calls look up ended dispatches: they are remembered while it can run

    def __init__(self) -> None:
        self.reported: set[str] = set()  # targets whose rollout was found nowhere, reported once each

    def for_target(self, schema: RolloutSchema | None, extractors: Sequence[Any]) -> Role:
        return self

    def finds_by_task(self, schema: RolloutSchema, extractors: Sequence[Any]) -> bool:
        return semconv.TASK_ID in start_names(extractors)

    def open_span(
        self, call: RoleCall, tracer: trace.Tracer, job: JobContext | None, current: Context, attributes: dict[str, Any]
    ) -> Span:
        if rollout_id_in(current) is None:  # (within its dispatch, or its propagated context: the usual verify)
            name = rollout_name(attributes)
            if names_a_rollout(name):
                parent = dispatch_parent(cast("LinkedCall", call), name, current, attributes)
                if parent is not None:
                    return tracer.start_span(self.span_name, context=parent, kind=self.span_kind, attributes=attributes)
                self.found_nowhere(call, name)
        return super().open_span(call, tracer, job, current, attributes)

    def found_nowhere(self, call: RoleCall, name: tuple[Any, ...]) -> None:
        if call.where in self.reported:
            return
        self.reported.add(call.where)
        _LOG.warning(
            "gym_instrument: %s: a verify after its dispatch found no dispatch of %s (none traced in this process, "
            "none in the persisted links it can read); its span is a root span of its own. Reported once per target",
            call.where,
            _named(name),
        )


def dispatch_parent(call: LinkedCall, name: RolloutName, current: Context, attributes: dict[str, Any]) -> Context | None:
    """``current`` with the ended dispatch span ``name`` names as its span: the parent of a verify
    after that dispatch, whose rollout id goes into ``attributes`` (None: found nowhere). Found as a
    health verdict finds it (the same lookup, :meth:`DispatchLinks.find`), but kept for the next
    verify: remembered in this process, else persisted by another (the links of the run in
    ``current``, else of the runs of no known output in the folder a setting names).

    Once per call: the parent is made here, not by a helper (one function call less per verify,
    what a health pass saves by making its parents with one maker for all its verdicts)."""
    link = call.links.find(name)
    if link is None:
        files = call.link_files
        if files is None:
            return None
        output = current.get(RUN_OUTPUT_KEY)
        link = files.find(output if isinstance(output, str) else None, (name,))[0]
        if link is None:
            return None
    span_context, rollout_id = link
    if rollout_id is not None:
        attributes[_ROLLOUT_ID] = rollout_id
    if SPAN_KEY is None:
        return trace.set_span_in_context(NonRecordingSpan(span_context), current)
    if not current:  # (the usual verify after: called outside any span, nothing else in context)
        return Context({SPAN_KEY: NonRecordingSpan(span_context)})
    values = current.copy()  # (a plain dict: a Context does not change in place)
    values[SPAN_KEY] = NonRecordingSpan(span_context)
    return Context(values)


_ROLLOUT_ID = semconv.ROLLOUT_ID


class BatchVerifyRole(Role):
    """One call that scores many rollouts (TRL's reward functions, ``f(prompts, completions,
    **columns) -> list[float]``; verl's reward manager), its target's schema declaring the batch
    (``batch``): no span around the call; one ``gym.verify`` per item of its result, a child of
    that item's rollout's ended dispatch span (found as :class:`VerifyAfterRole` finds it), with
    the item's reward and the function's name (``nemo.gym.verify.function``: several reward
    functions over one batch each give every rollout its verify), lasting as long as the call."""

    name = semconv.ROLE_VERIFY
    row_names = ("body", "request")
    uses_links = True

    def __init__(self) -> None:
        self.reported: set[str] = set()  # targets an item of which found no dispatch, reported once each

    def for_target(self, schema: RolloutSchema | None, extractors: Sequence[Any]) -> Role:
        return self

    def finds_by_task(self, schema: RolloutSchema, extractors: Sequence[Any]) -> bool:
        return any(attribute == semconv.TASK_ID for attribute, _ in schema.batch.names)

    def spanless_context(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        flight.started_at = time_ns()  # (the start of its items' spans)
        return flight.current

    def on_failure(self, call: RoleCall, flight: CallInFlight, exception: BaseException) -> None:
        # The call raised: no items, but each rollout its arguments name fails its verify.
        names = call.schema.batch_names(flight.call)
        if names:
            self.emit_items(call, flight, [(name, {}, MISSING) for name in names], exception)

    def emit(self, call: RoleCall, flight: CallInFlight, result: Any) -> None:
        self.emit_items(call, flight, call.schema.batch_facts(flight.call, result), None)

    def emit_items(
        self, call: RoleCall, flight: CallInFlight, facts: list[tuple[Any, dict[str, Any], Any]], exception: BaseException | None
    ) -> None:
        """One verify span per item: under its rollout's ended dispatch, failed with ``exception`` when the call raised."""
        tracer = flight.tracer()
        if tracer is None or not facts:
            return
        ended_at = time_ns()
        current = context.get_current()
        names = [name for name, _, _ in facts]
        links = flight.setup.links.find_many(names)
        files = flight.setup.link_files
        if files is not None and None in links:
            missing = [at for at, link in enumerate(links) if link is None and names_a_rollout(names[at])]
            if missing:
                output = current.get(RUN_OUTPUT_KEY)
                more = files.find(output if isinstance(output, str) else None, [names[at] for at in missing])
                for at, link in zip(missing, more, strict=True):
                    links[at] = link
        function = getattr(flight.call.function, "__qualname__", None)
        named = {semconv.VERIFY_FUNCTION: function} if type(function) is str else {}
        if call.framework is not None:
            named[semconv.FRAMEWORK] = call.framework
        each = flight.each_item if flight.has_item_extractors else None
        parent_of, started_at, start_span = parents_in(current), flight.started_at, tracer.start_span
        for (name, attributes, item), link in zip(facts, links, strict=True):
            if each is not None and exception is None:
                each(item, attributes)  # (run_extractors holds what they add to the masked rule)
            attributes.update(named)
            parent = current
            if link is not None:
                parent = parent_of(NonRecordingSpan(link[0]))
                if link[1] is not None:
                    attributes[semconv.ROLLOUT_ID] = link[1]
            elif call.where not in self.reported:
                self.reported.add(call.where)
                _LOG.warning(
                    "gym_instrument: %s: a batch item found no dispatch of %s (none traced in this process, none in the "
                    "persisted links it can read); its verify span is a root span of its own. Reported once per target",
                    call.where,
                    _named(name) or "no rollout (its item names none)",
                )
            span = start_span(semconv.SPAN_VERIFY, parent, trace.SpanKind.INTERNAL, attributes, start_time=started_at)
            if exception is not None:
                end_span(span, exception, isinstance(exception, (asyncio.CancelledError, GeneratorExit)), ended_at)
                continue
            span.end(ended_at)
            if semconv.ROLLOUT_REWARD in attributes:
                flight.count_rewarded(attributes.get(semconv.ROLLOUT_ID))


VERIFY_AFTER = VerifyAfterRole()
VERIFY_BATCH = BatchVerifyRole()
