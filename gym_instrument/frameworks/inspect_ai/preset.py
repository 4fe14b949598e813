"""inspect-ai (package ``inspect-ai``, tested on 0.3.285): each sample in each epoch is a rollout,
its scoring the verify, as a table of targets in the declarative form (data, no schema code).

Both seams are in private modules, read in the 0.3.285 wheel; both targets are optional, so a
version without them is a debug message, not an error:

- ``inspect_ai/log/_samples.py: active_sample(*, task, sample, epoch, ..., error_retries, sample_uuid)``,
  an ``@asynccontextmanager`` that ``_eval/task/run.py: _task_run_sample_attempt`` wraps around
  one attempt's solving **and** scoring: the dispatch, its row the ``sample`` argument (a
  ``Sample``). The task id is ``Sample.id``; the repeat is the epoch, which inspect counts from 1
  (shifted to SPEC's 0-based repeat); the rollout id is ``sample_uuid``, the id the logged
  ``EvalSample`` carries as ``uuid``, and the W3C baggage entry, so the verify inside the block
  names the same rollout. A retry (``retry_on_error``) enters the block again with the same uuid:
  its attempt is the number of earlier failed attempts, ``ActiveSample.retries`` (a property of
  what the block yields, so it is read when the block ends). A sample whose error inspect catches
  (``fail_on_error=False``) ends its block normally with an ``ErrorEvent`` as the last event of its
  transcript (``ActiveSample.transcript.events``): its dispatch span is failed. An attempt that is
  retried leaves no such event and its dispatch ends OK; the next attempt counts it.
- ``inspect_ai/hooks/_hooks.py: emit_sample_end(eval_set_id, run_id, eval_id, sample_id, sample)``,
  awaited inside the block once the sample is scored and logged: the verify, its request the
  ``EvalSample``. The reward is the first score's value (``scores`` is keyed by scorer name) mapped
  as inspect's own ``value_to_float()`` maps letters and words (C 1, P 0.5, I and N 0, yes/true 1,
  no/false 0; numbers kept). A sample whose error inspect caught (``fail_on_error=False``) has
  ``EvalSample.error`` set: its verify span is failed too. inspect's ``EvalError`` keeps the
  message and traceback, not the exception's type, so ``error.type`` is ``_OTHER`` on both spans
  (the message can quote the sample, and is not parsed).
"""

from __future__ import annotations

from typing import Any

from gym_instrument import semconv

FRAMEWORK = "inspect_ai"

# inspect's value_to_float(): its letters (CORRECT, PARTIAL, INCORRECT, NOANSWER) and the words it
# maps after lowercasing (listed in the case variants a scorer writes; the rule is data, not code).
_WORDS = {"yes": 1.0, "true": 1.0, "no": 0.0, "false": 0.0}
VALUE_TO_FLOAT: dict[str, float] = {
    "C": 1.0,
    "P": 0.5,
    "I": 0.0,
    "N": 0.0,
    **{variant: value for word, value in _WORDS.items() for variant in (word, word.capitalize(), word.upper())},
}

PRESET: dict[str, Any] = {
    "targets": [
        {
            "path": "inspect_ai.log._samples:active_sample",
            "role": "dispatch",
            "row": "sample",
            "schema": "generic",
            "framework": FRAMEWORK,
            "optional": True,
            "start": {
                semconv.TASK_ID: "row.id",
                semconv.ROLLOUT_REPEAT: {"path": "arg.epoch", "offset": -1},
                semconv.ROLLOUT_ID: "arg.sample_uuid",
            },
            "end": {semconv.ROLLOUT_ATTEMPT: "result.retries"},
            # An error inspect caught is the last event of the sample's transcript (an ErrorEvent).
            "failure": {"when": "result.transcript.events[-1].error"},
        },
        {
            "path": "inspect_ai.hooks._hooks:emit_sample_end",
            "role": "verify",
            "row": "sample",
            "schema": "generic",
            "framework": FRAMEWORK,
            "optional": True,
            "end": {
                semconv.ROLLOUT_REWARD: {"path": "row.scores.*.value", "map": VALUE_TO_FLOAT},
                semconv.ROLLOUT_ID: "row.uuid",
            },
            "failure": {"when": "row.error"},
        },
    ]
}
