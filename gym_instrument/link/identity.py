"""What names one rollout attempt, whatever the framework: its identity, and the index form of a
rollout id (``"{task_index}-{rollout_index}"``, with ``"-a{attempt}"`` for a retry)."""

from __future__ import annotations

import re

from gym_instrument.record.attributes import INT64_MAX as _INT64_MAX

_INDEX_FORM = re.compile(r"^(\d+)-(\d+)(?:-a(\d+))?$")


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
