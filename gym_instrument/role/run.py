"""``run``: a function that runs a whole collection or aggregation; no span of its own.

While it runs, the dispatches it makes persist their links beside its output (or in the named
folder), so that a health pass in another process finds them; an aggregation that merges shards
into one output records the merge, so that a later health pass over the merged output reads the
shards' links. What its argument says (the output file, the shards) is read by the target's schema.
"""

from __future__ import annotations

from typing import Any

from gym_instrument import semconv
from gym_instrument.link.files import LinkFiles
from gym_instrument.role.base import Role, RoleCall


class RunRole(Role):
    """A whole run: its dispatches' links go beside its output; a merge of shards is recorded."""

    name = semconv.ROLE_RUN
    decorated = False
    row_names = ("config",)
    names_run = True

    def run_output(self, call: RoleCall, row: Any, files: LinkFiles | None) -> str | None:
        """The output file the run writes (None: unknown); records a merge of shards into it."""
        output, sources = call.schema.run_files(row)
        if files is not None and output is not None and sources:
            files.record_merge(output, [source for source in sources if source != output])
        return output
