"""``run``: a function that runs a whole collection or aggregation; no span of its own.

While it runs, the dispatches it makes persist their links beside its output (or in the named
folder), so that a health pass in another process finds them; an aggregation that merges shards
into one output records the merge, so that a later health pass over the merged output reads the
shards' links. What its argument says (the output file, the shards) is read by the target's schema.
"""

from __future__ import annotations

from opentelemetry import context
from opentelemetry.context import Context

from gym_instrument import semconv
from gym_instrument.link.files import RUN_OUTPUT_KEY
from gym_instrument.role.base import CallInFlight, Role, RoleCall


class RunRole(Role):
    """A whole run: its dispatches' links go beside its output; a merge of shards is recorded."""

    name = semconv.ROLE_RUN
    decorated = False
    row_names = ("config",)

    def spanless_context(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        """The caller's context naming the output file the run writes (unknown: unchanged), for its
        dispatches' persisted links; a merge of shards into it is recorded."""
        current, files = flight.current, flight.setup.link_files
        output, sources = call.schema.run_files(flight.row)
        if files is not None and output is not None and sources:
            files.record_merge(output, [source for source in sources if source != output])
        return current if output is None else context.set_value(RUN_OUTPUT_KEY, output, current)
