"""``dispatch``: one span around each rollout attempt sent to an agent or environment."""

from __future__ import annotations

from typing import Any

from opentelemetry import baggage, context
from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.link.files import RUN_OUTPUT_KEY
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.record.step import TRAIN_STEPS
from gym_instrument.role.base import ROLLOUT_ID_CONTEXT_KEY, CallInFlight, Pending, Role, RoleCall
from gym_instrument.role.read_result import hold
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.rules import declared_identity, identity_attributes


class DispatchRole(Role):
    name = semconv.ROLE_DISPATCH
    span_name = semconv.SPAN_DISPATCH
    row_names = ("row", "json")
    ties_to_job = True

    def start_attributes(self, call: RoleCall, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        identity = call.schema.identity(row)
        attributes = identity_attributes(identity) if call.defaults else {}
        # The trainer's step and policy version, from the source the train_step setting declares
        # (not a rule of the row: its extractors replacing the defaults keep it).
        steps = TRAIN_STEPS
        key = steps.idle_without  # (a dispatch whose context holds no baggage asks nothing more)
        if key is None or current.get(key) is not None:
            step = steps.of(current)
            if step is not None:
                attributes.update(step)
        return attributes, identity

    def extracted_identity(self, identity: RolloutIdentity | None, attributes: dict[str, Any]) -> RolloutIdentity | None:
        # What the start rules and extractors name the rollout by (its id, its indices) names it,
        # baggage and its health verdict's link included (extract's convention).
        return declared_identity(identity, attributes)

    def relays(self, call: RoleCall, current: Context) -> bool:
        # A relay of a rollout already in flight (NeMo Gym 0.7.0's environment server forwards the
        # agent's /run as bytes): no row of its own, and either the schema says such a call of its
        # own framework's targets always relays (a decorated function called without a row is still
        # a dispatch) or the context already names a rollout. It is not a new dispatch; the
        # propagated context (ours or contrib's) keeps the trace unbroken.
        return (
            (call.schema.rowless_dispatch_relays and call.framework == call.schema.name)
            or baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current) is not None
            or context.get_value(ROLLOUT_ID_CONTEXT_KEY, current) is not None
        )

    def reads_result(self, schema: RolloutSchema) -> bool:
        return type(schema).dispatch_end_attributes is not RolloutSchema.dispatch_end_attributes

    def on_success(self, call: RoleCall, row: Any, result: Any) -> dict[str, Any]:
        return call.schema.dispatch_end_attributes(row, result)

    def defer(self, call: RoleCall, pending: Pending, result: Any) -> bool:
        # A response whose body (the rollout's result, its token totals) is read later: the read
        # ends the span (role.read_result), failed when it raises; a response never read ends it
        # when it is collected or at the process's exit.
        return call.schema.body_read_later(result) and hold(result, pending)

    def on_end(self, call: RoleCall, flight: CallInFlight, attributes: dict[str, Any] | None) -> None:
        # Remembered however it ended (a health pass judges failed rollouts too); identity None: the
        # row could not be read, and nothing names the rollout.
        identity = flight.identity
        if identity is not None:
            span_context = flight.span.get_span_context()  # type: ignore[union-attr]  # (a role with a span)
            setup = flight.setup
            if setup.remembers:
                setup.links.remember(span_context, identity)
            files = setup.link_files
            if files is not None:  # for a health pass in another process, beside the output of the run it belongs to
                files.persist(span_context, identity, flight.current.get(RUN_OUTPUT_KEY))  # type: ignore[arg-type]  # (a run's output file: role.run)
        next(flight.outcome)  # gym.rollout.dispatches, by outcome
