"""``health``: no span around the health pass itself; one child span per verdict of a traced dispatch.

:func:`verdict_spans` is the one place a verdict becomes a ``gym.rollout.health`` span under its
ended dispatch: the live health role and ``gym-instrument replay`` both go through it.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan

from gym_instrument import semconv
from gym_instrument.compat import parents_in
from gym_instrument.link.memory import DispatchLink, DispatchLinks
from gym_instrument.role.base import CallInFlight, Role, RoleCall
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.rules import VerdictName

_LOG = logging.getLogger("gym_instrument")

_VERDICT_ATTRIBUTES = {verdict: {"verdict": verdict} for verdict in (*semconv.KNOWN_VERDICTS, semconv.VERDICT_OTHER)}


def verdict_spans(
    tracer: trace.Tracer,
    links: DispatchLinks,
    schema: RolloutSchema,
    verdicts: Sequence[Any],
    spanned: list[Any],
    *,
    defaults: bool = True,
    each: Callable[[Any, dict[str, Any]], None] | None = None,
    start_time: int | None = None,
    more_links: _MoreLinks | None = None,
) -> None:
    """One ``gym.rollout.health`` span per verdict whose dispatch is remembered in ``links``, a child
    of that ended dispatch span (found and forgotten: at most one span per dispatch). A verdict of a
    rollout never traced here makes no span (no orphan root span). The verdict name of each span
    made is appended to ``spanned`` as it is made. ``each(verdict, attributes)``: the user's
    extractors, per verdict. ``start_time``: when the spans start and end (default: now).
    ``more_links``: where a verdict whose dispatch ``links`` does not hold is looked up next (the
    persisted links of the run), asked once for all of them; a verdict naming a rollout already
    found in ``links`` in this pass is not asked for (one span per rollout per pass)."""
    # Each health span's parent is an ended dispatch span: set in (a copy of) the current context, not made current.
    parent_of = parents_in(context.get_current())
    facts = schema.verdict_facts(verdicts)
    names = [name for name, _ in facts]
    found = links.take_many(names)
    # (looked up once per pass, not once per verdict)
    start_span, span_name, kind, made = tracer.start_span, semconv.SPAN_HEALTH, trace.SpanKind.INTERNAL, spanned.append
    rollout_id_key, verdict_key = semconv.ROLLOUT_ID, semconv.HEALTH_VERDICT
    # The verdicts ``links`` found, then those the persisted links find (asked once the first spans are made).
    pairs = chain(enumerate(found), _asked(names, found, more_links))
    del found  # (let go before the persisted links are asked: see _asked)
    for at, link in pairs:
        if link is None:  # (never traced here, or evicted: no orphan root span)
            continue
        attributes = facts[at][1] if defaults else {}
        if each is not None:
            each(verdicts[at], attributes)
        rollout_id = link[1]
        if rollout_id is not None:  # (None: a dispatch named by its task id and repeat alone had no rollout id)
            attributes[rollout_id_key] = rollout_id
        start_span(
            span_name,
            context=parent_of(NonRecordingSpan(link[0])),
            kind=kind,
            attributes=attributes,
            start_time=start_time,
        ).end(start_time)
        made(attributes.get(verdict_key))


def _asked(
    names: list[VerdictName], found: list[DispatchLink | None], more_links: _MoreLinks | None
) -> Iterator[tuple[int, DispatchLink | None]]:
    """The verdicts ``links`` found nothing for (:func:`_not_found_yet`), each with what ``more_links`` finds."""
    if more_links is None:
        return
    asked = _not_found_yet(names, found)
    del found  # (the links of a whole pass, not held while the files are read)
    if asked:
        yield from zip(asked, more_links([names[at] for at in asked]), strict=True)


_MoreLinks = Callable[[list[VerdictName]], Iterable[DispatchLink | None]]


def _not_found_yet(names: list[VerdictName], found: list[DispatchLink | None]) -> list[int]:
    """The verdicts ``links`` found nothing for whose rollout no other verdict of the pass found
    (one span per rollout per pass: a verdict listed twice gets no second span from elsewhere)."""
    missing = [at for at, link in enumerate(found) if link is None]
    if not missing or len(missing) == len(found):
        return missing
    seen_ids, seen_indices, seen_tasks = set(), set(), set()
    for at, link in enumerate(found):
        if link is not None:
            rollout_id, task_index, rollout_index = names[at][:3]
            seen_ids.add(link[1])
            if rollout_id is not None:
                seen_ids.add(rollout_id)
            if task_index is not None and rollout_index is not None:
                seen_indices.add((task_index, rollout_index))
            if len(names[at]) > 3 and names[at][3] is not None:
                seen_tasks.add((names[at][3], rollout_index))
    return [
        at
        for at in missing
        if names[at][0] not in seen_ids
        and (names[at][1], names[at][2]) not in seen_indices
        and (len(names[at]) <= 3 or (names[at][3], names[at][2]) not in seen_tasks)
    ]


def verdict_counts(spanned: Sequence[Any]) -> list[tuple[dict[str, str], int]]:
    """The bounded metric points of a pass's verdicts: known verdict names, every other one as ``other``."""
    tally: Counter[str] = Counter()
    for name, count in Counter(spanned).items():
        tally[name if name in semconv.KNOWN_VERDICTS else semconv.VERDICT_OTHER] += count
    return [(_VERDICT_ATTRIBUTES[name], count) for name, count in tally.items()]


def rollout_paths(argument: Any) -> list[str]:
    """The rollout file or files a health function was given (a path, or a list of them)."""
    if isinstance(argument, (str, os.PathLike)):
        return [os.fspath(argument)]
    if isinstance(argument, (list, tuple)):
        return [os.fspath(path) for path in argument if isinstance(path, (str, os.PathLike))]
    return []


class HealthRole(Role):
    """No span around the health pass itself: one child span per verdict of a traced dispatch."""

    name = semconv.ROLE_HEALTH
    row_names = ("rollout_paths",)
    uses_links = True

    def __init__(self) -> None:
        self.reported: set[str] = set()  # targets whose result yielded no verdict, reported once each

    def finds_by_task(self, schema: RolloutSchema, extractors: Sequence[Any]) -> bool:
        return schema.verdicts_name_tasks

    def yielded_nothing(self, call: RoleCall, result: Any) -> None:
        """A result its schema reads no verdict from, when that is not a pass with nothing to judge:
        logged once per target (what it is: its type and keys, never its values)."""
        if call.where in self.reported:
            return
        shape = call.schema.unread_result(result)
        if shape is None:
            return
        self.reported.add(call.where)
        _LOG.warning(
            "gym_instrument: %s: its health result (%s) yields no verdict (schema %s): no health span is made; "
            "say what it returns with verdicts. Reported once per target",
            call.where,
            shape,
            call.schema.name,
        )

    def emit(self, call: RoleCall, flight: CallInFlight, result: Any) -> None:
        tracer = flight.tracer()
        if tracer is None:
            return
        spanned: list[Any] = []  # the verdict name of each span, counted once per pass (the same sums)
        files = flight.setup.link_files
        more_links = None
        if files is not None:
            paths = rollout_paths(flight.row)
            if paths:
                more_links = partial(files.lookup, paths)
        verdicts = [*call.schema.verdicts(result)]
        if not verdicts:
            self.yielded_nothing(call, result)
        try:
            verdict_spans(
                tracer,
                flight.setup.links,
                call.schema,
                verdicts,
                spanned,
                defaults=call.defaults,
                each=flight.each_item if flight.has_item_extractors else None,
                more_links=more_links,
            )
        finally:
            for attributes, count in verdict_counts(spanned):
                flight.count(semconv.METRIC_VERDICTS, attributes, count)
