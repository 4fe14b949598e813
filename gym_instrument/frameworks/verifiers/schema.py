"""How verifiers 0.4.0 names and scores its rollouts, as paths of the declarative form.

Every verifiers field name the package reads is here, beside the preset's target table
(``preset.py``); each was read in the 0.4.0 source (``verifiers/v1/``):

- ``env.py: Env.run_episode(self, task, ctx, *, on_trace=None, on_discard=None) -> Episode``, one
  call per episode attempt (``Env.run_slot`` calls it again for a retry): the dispatch, its row the
  ``task`` argument.
- ``task.py: TaskData`` (the task row is ``task.data``): ``idx`` (int, set from the order of the
  taskset's ``load()``), ``id`` and ``name`` (``str | None``).
- ``episode.py: Episode``: ``ok`` (bool, False for a failed episode, which is returned, never
  raised), ``errors`` (hook failures), ``traces`` (every agent's trace, in completion order).
- ``trace.py: Trace``: ``id`` (``uuid4().hex``, made inside ``run_episode``), ``errors`` (``Error``
  with ``type``: a model or agent failure), the property ``reward`` (sum of score x weight of
  ``rewards``, which ``Task.score`` writes).
- ``task.py: Task.score(self, trace, runtime=None) -> None``: the verify, awaited inside the
  episode (``rollout.py: Rollout.close``); it returns nothing and writes ``trace.rewards``, so the
  reward is read from the trace argument after the call.

The rollout id is the trace's id: the one id both spans can see (``Task.score`` is given the
trace, not the episode) and the one vf-eval's own log prints (``rollout start: id=...``). It is
known only when ``run_episode`` returns, so the dispatch span gets it at its end and it is not in
baggage; the verify span reads it from its trace argument. verifiers has no repeat index
(``Env.slots`` makes n identical slots) and no attempt index: ``nemo.gym.rollout.repeat`` and
``nemo.gym.rollout.attempt`` are omitted, because any number derived here (a count of dispatches
per task) would depend on scheduling and retries, not on the run, and would differ between two
runs of the same evaluation.
"""

from __future__ import annotations

from typing import Any

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.fields import MISSING, index_value, rollout_id_string, task_id_of
from gym_instrument.schema.paths import read_attribute, read_item
from gym_instrument.schema.rules import outcome_attributes

FRAMEWORK = "verifiers"

TASK_ID_FIELDS = ("id", "name")  # of task.data; omitted when the task has neither


def _last(value: Any, name: str) -> Any:
    """The last item of ``value``'s list ``name`` (MISSING when absent or empty)."""
    items = read_attribute(value, name)
    return MISSING if items is MISSING or items is None else read_item(items, -1)


def _first_id(*values: Any) -> str | None:
    for value in values:
        if value is MISSING:
            continue
        found = rollout_id_string(value)
        if found is not None:
            return found
    return None


class VerifiersSchema(RolloutSchema):
    name = FRAMEWORK

    def identity(self, row: Any) -> RolloutIdentity:
        """A ``Task``: task id from ``task.data.id`` (else ``name``), task index ``task.data.idx``."""
        data = read_attribute(row, "data")
        if data is MISSING or data is None:
            return RolloutIdentity()
        return RolloutIdentity(task_id=task_id_of(data, TASK_ID_FIELDS), task_index=index_value(read_attribute(data, "idx")))

    def dispatch_end_attributes(self, row: Any, result: Any) -> dict[str, Any]:
        """An ``Episode``: its rollout id is its agent trace's (the last one's for a multi-agent episode),
        else the episode's; ``ok=False`` is a failure returned as data, its type on the trace (a model
        or agent failure) or on the episode (a hook failure)."""
        attributes: dict[str, Any] = {}
        trace = _last(result, "traces")
        rollout_id = _first_id(read_attribute(trace, "id") if trace is not MISSING else MISSING, read_attribute(result, "id"))
        if rollout_id is not None:
            attributes[semconv.ROLLOUT_ID] = rollout_id
        if read_attribute(result, "ok") is False:
            trace_error = _last(trace, "errors") if trace is not MISSING else MISSING
            episode_error = _last(result, "errors")
            kind = _first_id(
                read_attribute(trace_error, "type") if trace_error is not MISSING else MISSING,
                read_attribute(episode_error, "type") if episode_error is not MISSING else MISSING,
            )
            attributes[semconv.ERROR_TYPE] = kind or semconv.ERROR_TYPE_OTHER
        return attributes

    def request_rollout_id(self, request: Any) -> str | None:
        """The scored ``Trace``'s id."""
        return rollout_id_string(read_attribute(request, "id")) if request is not None else None

    def verify_attributes(self, request: Any, result: Any) -> dict[str, Any]:
        """``Task.score`` returns nothing and writes ``trace.rewards``: the reward is the trace's
        weighted sum (the property ``Trace.reward``), read after the call."""
        reward = read_attribute(request, "reward") if request is not None else MISSING
        return outcome_attributes(None if reward is MISSING else reward, None, None)


SCHEMA = VerifiersSchema()
