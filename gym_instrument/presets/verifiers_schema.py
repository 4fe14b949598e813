"""How verifiers 0.4.0 names and scores its rollouts, as paths of the declarative form.

Every verifiers field name the package reads is here, beside the preset's target table
(``verifiers.py``); each was read in the 0.4.0 source (``verifiers/v1/``):

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

FRAMEWORK = "verifiers"

EPISODE_TASK_ARGUMENT = "task"
SCORED_TRACE_ARGUMENT = "trace"

# The dispatch: Env.run_episode(task, ...) -> Episode.
DISPATCH: dict[str, Any] = {
    "row": EPISODE_TASK_ARGUMENT,
    "schema": "generic",  # no NeMo Gym row rules: a Task is read through the paths below only
    "framework": FRAMEWORK,
    "start": {
        semconv.TASK_ID: ["row.data.id", "row.data.name"],  # omitted when the task has neither
        semconv.TASK_INDEX: "row.data.idx",
    },
    "end": {
        # The episode's agent trace (the last one for a multi-agent episode), else the episode itself.
        semconv.ROLLOUT_ID: ["result.traces[-1].id", "result.id"],
    },
    # A failed episode is returned with ok=False: a model or agent failure is on its trace, a hook
    # failure on the episode.
    "failure": {
        "when": "result.ok",
        "equals": False,
        "error_type": ["result.traces[-1].errors[-1].type", "result.errors[-1].type"],
    },
}

# The verify: Task.score(trace, runtime=None) -> None, which writes trace.rewards.
VERIFY: dict[str, Any] = {
    "row": SCORED_TRACE_ARGUMENT,
    "schema": "generic",
    "framework": FRAMEWORK,
    "start": {semconv.ROLLOUT_ID: "row.id"},
    "end": {semconv.ROLLOUT_REWARD: "row.reward"},  # the weighted sum, once Task.score wrote rewards
}
