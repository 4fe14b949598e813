"""``dispatch``: one span around each rollout attempt sent to an agent or environment."""

from __future__ import annotations

from typing import Any

from opentelemetry import baggage, context
from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.record.step import TRAIN_STEPS
from gym_instrument.role.base import ROLLOUT_ID_CONTEXT_KEY, Pending, Role, RoleCall
from gym_instrument.role.read_result import hold
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.rules import identity_attributes


class DispatchRole(Role):
    name = semconv.ROLE_DISPATCH
    span_name = semconv.SPAN_DISPATCH
    row_names = ("row", "json")
    carries_rollout_id = True
    counts_outcome = True
    remembers_dispatch = True
    ties_to_job = True

    def start_attributes(self, call: RoleCall, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        identity = call.schema.identity(row)
        attributes = identity_attributes(identity) if call.defaults else {}
        # The trainer's step and policy version, from the source the train_step setting declares
        # (not a rule of the row: its extractors replacing the defaults keep it).
        step = TRAIN_STEPS.of(current)
        if step is not None:
            attributes.update(step)
        return attributes, identity

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
