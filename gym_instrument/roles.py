"""What a wrapped function does in a rollout: one small class per role, looked up in :data:`ROLES`.

A role says what its span is called, which attributes it puts on it at the start and at a
successful end (read through the target's schema), and what else happens when a call ends, as
capability flags the engine (``plan``) acts on: count the outcome, count a reward, remember the
ended span for a health verdict, turn the result into child spans, run in an empty context.
A new role is one class here and one line in :data:`ROLES`; its decorator
(``gym_instrument.<name>``) and its target role name come from the table.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind

from gym_instrument import semconv
from gym_instrument.compat import parents_in
from gym_instrument.extract import run_extractors
from gym_instrument.job import has_parent
from gym_instrument.record import FrameworkSpan, framework_span
from gym_instrument.schema import RolloutIdentity, identity_attributes, rollout_id_string

if TYPE_CHECKING:
    from gym_instrument.plan import Active, Plan, Setup

# The rollout id when baggage is kept in-process only (OTEL_PYTHON_GYM_BAGGAGE=false): a plain
# context value, which no propagator writes into outgoing headers.
ROLLOUT_ID_CONTEXT_KEY = context.create_key(semconv.BAGGAGE_ROLLOUT_ID)

_VERDICT_ATTRIBUTES = {verdict: {"verdict": verdict} for verdict in (*semconv.KNOWN_VERDICTS, semconv.VERDICT_OTHER)}


def rollout_id_in(current: Context) -> str | None:
    """The rollout id the context carries: the W3C baggage entry, else the in-process value."""
    rollout_id = baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current)
    if rollout_id is None:
        rollout_id = context.get_value(ROLLOUT_ID_CONTEXT_KEY, current)
    return rollout_id_string(rollout_id)


class Role:
    """The interface of a role, with what most roles do (nothing)."""

    name: str = ""
    span_name: str | None = None  # None: no span around the call
    row_names: tuple[str, ...] = ()  # where the row sits when the target does not say (else: first argument)
    decorated = True  # gym_instrument.<name> exists as a decorator
    # Capability flags: what the engine does when a call of this role ends.
    carries_rollout_id = False  # the call's rollout id goes into its context (baggage), for what it causes
    counts_outcome = False  # gym.rollout.dispatches, by outcome
    counts_reward = False  # gym.rollout.rewarded_total, when the span got a reward
    remembers_dispatch = False  # the ended span is remembered for its health verdict
    emits_child_spans = False  # the result is turned into child spans (emit)
    isolates = False  # the call runs in an empty context

    def start_attributes(self, plan: Plan, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        """The span's attributes at its start (the role's own rules; ``{}`` when they are off), and
        the rollout's identity, which names the span and its baggage whatever the rules."""
        return {}, None

    def relays(self, current: Context) -> bool:
        """Whether a call with no row of its own, in ``current``, is not this role's (it runs untouched)."""
        return False

    def open_span(self, plan: Plan, tracer: trace.Tracer, setup: Setup, current: Context, attributes: dict[str, Any]) -> Span:
        """The call's span: a new one, or the framework's own span of the same name that it runs in
        (when the target's schema says its framework makes one).

        The engine calls it only when the schema says so or the process runs for a job (TRACEPARENT);
        otherwise it starts the plain span itself (``tracer.start_span`` of the role's span name in the
        call's context, kind INTERNAL, with the start attributes): one call less on every call."""
        outer = framework_span(current, self.span_name) if plan.adopts and current else None  # type: ignore[arg-type]
        if outer is not None:
            if attributes:
                outer.set_attributes(attributes)
            return FrameworkSpan(outer)
        return tracer.start_span(self.span_name, context=current, kind=SpanKind.INTERNAL, attributes=attributes)  # type: ignore[arg-type]

    def on_success(self, plan: Plan, result: Any) -> dict[str, Any]:
        """The span's attributes from a returned result (the role's own rules are on)."""
        return {}

    def emit(self, active: Active, result: Any) -> None:
        """Child spans from a result (``emits_child_spans`` roles), or from each item a generator yields."""


class DispatchRole(Role):
    name = semconv.ROLE_DISPATCH
    span_name = semconv.SPAN_DISPATCH
    row_names = ("row", "json")
    carries_rollout_id = True
    counts_outcome = True
    remembers_dispatch = True

    def start_attributes(self, plan: Plan, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        identity = plan.schema.identity(row)
        return (identity_attributes(identity) if plan.defaults else {}), identity

    def relays(self, current: Context) -> bool:
        # A relay of a rollout already in flight (NeMo Gym 0.7.0's environment server forwards the
        # agent's /run as bytes): no row of its own, and the context already names a rollout. It is
        # not a new dispatch; the HTTP spans around it keep the trace unbroken.
        return (
            baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current) is not None
            or context.get_value(ROLLOUT_ID_CONTEXT_KEY, current) is not None
        )

    def open_span(self, plan: Plan, tracer: trace.Tracer, setup: Setup, current: Context, attributes: dict[str, Any]) -> Span:
        job = setup.job
        if job is None or has_parent(current):
            return Role.open_span(self, plan, tracer, setup, current, attributes)
        # A root dispatch in a process started for a job (TRACEPARENT): linked to it, or its child.
        if job.as_parent:
            return tracer.start_span(
                self.span_name, context=job.parent_of(current), kind=SpanKind.INTERNAL, attributes=attributes
            )
        return tracer.start_span(self.span_name, context=current, kind=SpanKind.INTERNAL, attributes=attributes, links=job.links)


class VerifyRole(Role):
    name = semconv.ROLE_VERIFY
    span_name = semconv.SPAN_VERIFY
    row_names = ("body", "request")
    counts_reward = True

    def start_attributes(self, plan: Plan, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        if not plan.defaults:
            return {}, None
        # SPEC section 3: the rollout id the request carries, else the one propagated in baggage.
        rollout_id = plan.schema.request_rollout_id(row)
        if rollout_id is None:
            rollout_id = rollout_id_in(current)
        return ({semconv.ROLLOUT_ID: rollout_id} if rollout_id is not None else {}), None

    def on_success(self, plan: Plan, result: Any) -> dict[str, Any]:
        return plan.schema.result_attributes(result)


class HealthRole(Role):
    """No span around the health pass itself: one child span per verdict of a traced dispatch."""

    name = semconv.ROLE_HEALTH
    row_names = ("rollout_paths",)
    emits_child_spans = True

    def emit(self, active: Active, result: Any) -> None:
        setup, plan = active.setup, active.plan
        tracer = setup.recorder.tracer()
        if tracer is None:
            return
        call, extractors = active.call, plan.end_extractors
        # Each health span's parent is an ended dispatch span: set in (a copy of) the current context, not made current.
        parent_of = parents_in(context.get_current())
        spanned: list[Any] = []  # the verdict name of each span, counted once per pass (the same sums)
        try:
            verdicts = [*plan.schema.verdicts(result)]
            facts = plan.schema.verdict_facts(verdicts)
            links = setup.links.take_many([name for name, _ in facts])
            for verdict, (_, own), link in zip(verdicts, facts, links, strict=True):
                if link is None:
                    continue  # never traced here (or evicted): no orphan root span
                attributes = own if plan.defaults else {}
                if extractors:
                    call.verdict = verdict  # type: ignore[union-attr]
                    run_extractors(extractors, call, attributes)  # type: ignore[arg-type]
                attributes[semconv.ROLLOUT_ID] = link[1]
                tracer.start_span(
                    semconv.SPAN_HEALTH,
                    context=parent_of(NonRecordingSpan(link[0])),
                    kind=SpanKind.INTERNAL,
                    attributes=attributes,
                ).end()
                spanned.append(attributes.get(semconv.HEALTH_VERDICT))
        finally:
            tally: Counter[str] = Counter()
            for name, count in Counter(spanned).items():
                tally[name if name in semconv.KNOWN_VERDICTS else semconv.VERDICT_OTHER] += count
            for name, count in tally.items():
                setup.recorder.count(semconv.METRIC_VERDICTS, _VERDICT_ATTRIBUTES[name], count)


class IsolateRole(Role):
    """A request boundary: the call runs in an empty OpenTelemetry context, with no gym call active.

    uvicorn can start a keep-alive connection's next request inside the context of the previous
    one (its task is created from a transport callback that ran in that context); the ASGI
    middleware would then parent the request to the previous request's ended span and ignore
    its own ``traceparent`` and ``baggage``, so a verify would carry another rollout's id.
    """

    name = semconv.ROLE_ISOLATE
    decorated = False
    isolates = True


ROLES: dict[str, Role] = {role.name: role for role in (DispatchRole(), VerifyRole(), HealthRole(), IsolateRole())}
