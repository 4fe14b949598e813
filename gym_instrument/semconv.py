"""Names of the spans, attributes and metrics this package emits (SPEC sections 2-5)."""

from __future__ import annotations

from typing import Final

INSTRUMENTATION_NAME: Final = "gym_instrument"

# Roles: what a wrapped function does in a rollout pipeline.
ROLE_DISPATCH: Final = "dispatch"
ROLE_VERIFY: Final = "verify"
ROLE_HEALTH: Final = "health"
# A request boundary: the call runs in an empty trace context (no span, no attributes). Presets
# use it where a server can start a request inside the previous request's context.
ROLE_ISOLATE: Final = "isolate"
ROLE_RUN: Final = "run"
# A client call whose request carries the current context in its headers (no span).
ROLE_INJECT: Final = "inject"
# A server's request boundary: an empty context with the request's trace context and baggage in it (no span).
ROLE_RECEIVE: Final = "receive"
# One call of an agent to a model, made in the model server (a GenAI CLIENT span).
ROLE_MODEL_CALL: Final = "model_call"
# A read of a response's body: ends a dispatch whose result (its token totals) is read after it returned (no span).
ROLE_READ_RESULT: Final = "read_result"

# Spans.
SPAN_DISPATCH: Final = "gym.rollout.dispatch"
SPAN_VERIFY: Final = "gym.verify"
SPAN_HEALTH: Final = "gym.rollout.health"

# Span attributes.
TASK_ID: Final = "nemo.gym.task.id"
TASK_INDEX: Final = "nemo.gym.task.index"
ROLLOUT_REPEAT: Final = "nemo.gym.rollout.repeat"
ROLLOUT_ATTEMPT: Final = "nemo.gym.rollout.attempt"
ROLLOUT_ID: Final = "nemo.gym.rollout.id"
AGENT_NAME: Final = "nemo.gym.agent.name"
ROLLOUT_REWARD: Final = "nemo.gym.rollout.reward"
VERIFY_MASKED: Final = "nemo.gym.verify.masked"
FAILURE_KIND: Final = "nemo.gym.failure_kind"
# The scoring function a verify span's reward comes from (its qualified name), where one call scores
# a batch: several reward functions over one batch each give every rollout a verify span.
VERIFY_FUNCTION: Final = "nemo.gym.verify.function"
HEALTH_VERDICT: Final = "nemo.gym.health.verdict"
HEALTH_CHECKS: Final = "nemo.gym.health.checks"
# How a rollout's reward follows from its verify spans when it has several (a multi-step
# environment scores every step): on each verify span, one of REWARD_RULES; absent means "last".
REWARD_RULE: Final = "nemo.gym.rollout.reward_rule"
REWARD_RULES: Final = ("last", "sum", "max", "first")
# The rollout framework a dispatch or verify span's target belongs to (a preset's name, or what a
# declared target says): one dashboard reads several frameworks' spans and can still tell them apart.
FRAMEWORK: Final = "nemo.gym.framework"
ERROR_TYPE: Final = "error.type"
# OpenTelemetry's GenAI semantic conventions: model calls, and a rollout's token totals on its dispatch.
GEN_AI_OPERATION: Final = "gen_ai.operation.name"
GEN_AI_OPERATION_CHAT: Final = "chat"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
# The trainer's step whose rollouts a dispatch runs, and the policy version that generates them (on
# dispatch spans; never a metric attribute: a run has as many steps as it trains). The baggage
# entries a trainer sets to say them have the same names (BAGGAGE_TRAIN_STEP, BAGGAGE_POLICY_VERSION).
TRAIN_STEP: Final = "nemo.gym.train.step"
POLICY_VERSION: Final = "nemo.gym.policy.version"
# How many model calls a rollout made, where its framework says (on the dispatch span).
ROLLOUT_MODEL_CALLS: Final = "nemo.gym.rollout.model_calls"
ERROR_TYPE_CANCELLED: Final = "cancelled"
# A failure that says no type of its own (OpenTelemetry's semantic conventions' fallback value).
ERROR_TYPE_OTHER: Final = "_OTHER"

# W3C baggage entry that names the rollout in everything a dispatch causes.
BAGGAGE_ROLLOUT_ID: Final = "nemo.gym.rollout.id"
# W3C baggage entries a trainer sets around the rollouts of one step: every dispatch they reach
# carries them as TRAIN_STEP (a whole number >= 0) and POLICY_VERSION (record.step).
BAGGAGE_TRAIN_STEP: Final = "nemo.gym.train.step"
BAGGAGE_POLICY_VERSION: Final = "nemo.gym.policy.version"

# Metrics: bounded attributes only (SPEC section 5).
METRIC_REWARDED: Final = "gym.rollout.rewarded_total"
METRIC_DISPATCHES: Final = "gym.rollout.dispatches"
METRIC_VERDICTS: Final = "gym.rollout.verdicts"
METRIC_LINK_EVICTIONS: Final = "gym.link.evictions"
OUTCOME: Final = "outcome"
OUTCOME_OK: Final = "ok"
OUTCOME_ERROR: Final = "error"
OUTCOME_CANCELLED: Final = "cancelled"
VERDICT_OTHER: Final = "other"
KNOWN_VERDICTS: Final = frozenset({"healthy", "unhealthy", "unobserved"})
