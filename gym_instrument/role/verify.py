"""``verify``: one span around each scoring of a rollout, with its reward."""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.role.base import Role, RoleCall, rollout_id_in
from gym_instrument.schema.rules import without_masked_reward


class VerifyRole(Role):
    name = semconv.ROLE_VERIFY
    span_name = semconv.SPAN_VERIFY
    row_names = ("body", "request")
    counts_reward = True

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
