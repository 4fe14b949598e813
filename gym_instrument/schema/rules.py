"""The attribute rules of SPEC sections 2-4, one each, for every schema and every declared rule.

A framework's schema reads its own fields and hands the values to these rules; a declared
attribute rule (``[targets.start]`` / ``[targets.end]``) converts what its path read with the rule
of the same attribute name (:data:`CONVERSIONS`). The rules are written here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity, index_form, parse_index_form
from gym_instrument.record.attributes import utf8_safe
from gym_instrument.schema.fields import field, index_value, is_a, plain_str, render_task_id, rollout_id_string


def identity_attributes(identity: RolloutIdentity) -> dict[str, Any]:
    """SPEC section 2: a dispatch span's task id, indices, rollout id and agent name."""
    attributes: dict[str, Any] = {}
    if identity.task_id is not None:
        attributes[semconv.TASK_ID] = identity.task_id
    if identity.rollout_index is not None:
        attributes[semconv.ROLLOUT_REPEAT] = identity.rollout_index
    if identity.task_index is not None:
        attributes[semconv.TASK_INDEX] = identity.task_index
    if identity.attempt is not None:
        attributes[semconv.ROLLOUT_ATTEMPT] = identity.attempt
    if identity.rollout_id is not None:
        attributes[semconv.ROLLOUT_ID] = identity.rollout_id
    if identity.agent_name is not None:
        attributes[semconv.AGENT_NAME] = identity.agent_name
    return attributes


def declared_identity(identity: RolloutIdentity | None, attributes: dict[str, Any]) -> RolloutIdentity | None:
    """``identity`` as a dispatch's start rules and extractors name it: the task id, indices,
    attempt and rollout id they returned replace the schema's. Without a rollout id of their own,
    declared indices name the rollout by the index form (``"{task_index}-{repeat}"``), which then
    becomes the span's rollout id attribute too. Unchanged (the same object) when they name nothing."""
    get = attributes.get
    task_id, task_index, repeat = get(semconv.TASK_ID), get(semconv.TASK_INDEX), get(semconv.ROLLOUT_REPEAT)
    attempt, rollout_id = get(semconv.ROLLOUT_ATTEMPT), rollout_id_string(get(semconv.ROLLOUT_ID))
    if task_id is None and task_index is None and repeat is None and attempt is None and rollout_id is None:
        return identity
    if identity is None:
        identity = RolloutIdentity()
    if type(task_id) is str:
        identity.task_id = task_id
    indexed = False
    for name, value in (("task_index", task_index), ("rollout_index", repeat), ("attempt", attempt)):
        value = index_value(value)
        if value is not None and value != getattr(identity, name):
            setattr(identity, name, value)
            indexed = True
    if rollout_id is not None:
        identity.rollout_id = rollout_id
        identity.custom_id = parse_index_form(rollout_id) is None
    elif (indexed or identity.rollout_id is None) and not identity.custom_id:
        if identity.task_index is not None and identity.rollout_index is not None:
            identity.rollout_id = index_form(identity.task_index, identity.rollout_index, identity.attempt)
            attributes[semconv.ROLLOUT_ID] = identity.rollout_id
    return identity


def numeric_reward(value: Any) -> float | None:
    """A reward as a float when it is a number (int or float, not bool) and finite; else None."""
    kind = type(value)
    if kind is bool or not issubclass(kind, (int, float)):
        return None
    try:
        # float subclasses (numpy.float64) count; their own __float__ is not trusted
        reward = float.__float__(value) if issubclass(kind, float) else int.__float__(value)
    except OverflowError:
        return None
    return reward if math.isfinite(reward) else None


def outcome_attributes(reward: Any, masked: Any, failure_kind: Any) -> dict[str, Any]:
    """SPEC section 3: a verify span's reward (numeric, finite, unmasked only), masked flag and failure kind."""
    attributes: dict[str, Any] = {}
    if masked is not True:
        value = numeric_reward(reward)
        if value is not None:
            attributes[semconv.ROLLOUT_REWARD] = value
    if type(masked) is bool:
        attributes[semconv.VERIFY_MASKED] = masked
    kind = rollout_id_string(failure_kind)
    if kind is not None:
        attributes[semconv.FAILURE_KIND] = kind
    return attributes


def without_masked_reward(attributes: dict[str, Any]) -> dict[str, Any]:
    """SPEC section 3 over a verify's attributes from every source (its schema, declared rules,
    extractors): when they say it is masked, it carries no reward, whichever of them read one.
    Changed in place (the span and the rewarded count read the same dict) and returned."""
    if attributes.get(semconv.VERIFY_MASKED) is True:
        attributes.pop(semconv.ROLLOUT_REWARD, None)
    return attributes


def checks_of(findings: Any, check_field: str | None = "check") -> list[str]:
    """Sorted, distinct check ids of a list of findings (``check_field`` None: a list of strings)."""
    if not is_a(findings, (list, tuple)):
        return []
    try:
        return distinct_checks(findings if check_field is None else [field(finding, check_field) for finding in findings])
    except Exception:  # findings that cannot be read are no findings
        return []


def distinct_checks(checks: Iterable[Any]) -> list[str]:
    """Sorted, distinct check ids of what findings name, each a string as a rollout id is (empty
    ones left out). A schema that reads its own findings' checks directly hands them here."""
    distinct = set()
    for check in checks:
        if type(check) is not str or not check.isascii():
            check = rollout_id_string(check)
        if check:
            distinct.add(check)
    return sorted(distinct)


def verdict_attributes(name: Any, checks: list[str]) -> dict[str, Any]:
    """SPEC section 4: a health span's verdict name and its sorted distinct failed checks."""
    if type(name) is str and name.isascii():  # (the usual verdict: nothing to make of it)
        return {_HEALTH_CHECKS: checks, _HEALTH_VERDICT: name}
    attributes: dict[str, Any] = {_HEALTH_CHECKS: checks}
    text = plain_str(name)
    if text is not None:
        attributes[_HEALTH_VERDICT] = text if text.isascii() else utf8_safe(text)
    return attributes


_HEALTH_CHECKS, _HEALTH_VERDICT = semconv.HEALTH_CHECKS, semconv.HEALTH_VERDICT


# What names the dispatch a verdict belongs to: (rollout id, task index, rollout index), or with a
# task id and an attempt after them (a verdict by task and repeat); any may be None.
VerdictName = tuple[Any, ...]


def names_a_rollout(name: VerdictName) -> bool:
    """Whether a verdict's (or a verify's) name can name a dispatch: a rollout id, a task index and
    a repeat, or a task id and a repeat."""
    rollout_id, task_index, repeat = name[:3]
    return rollout_id is not None or (repeat is not None and (task_index is not None or (len(name) > 3 and name[3] is not None)))


# A verdict as the health role reads it: its name and its span's attributes.
VerdictFacts = tuple[VerdictName, dict[str, Any]]


def usage_attributes(input_tokens: Any, output_tokens: Any) -> dict[str, Any]:
    """Token counts (GenAI ``gen_ai.usage.*``): each an int >= 0, omitted otherwise."""
    attributes: dict[str, Any] = {}
    count = index_value(input_tokens)
    if count is not None:
        attributes[semconv.GEN_AI_INPUT_TOKENS] = count
    count = index_value(output_tokens)
    if count is not None:
        attributes[semconv.GEN_AI_OUTPUT_TOKENS] = count
    return attributes


def model_call_name_attributes(operation: Any, request_model: Any) -> dict[str, Any]:
    """A model call's operation and requested model (GenAI), which also name its span; names only."""
    attributes: dict[str, Any] = {semconv.GEN_AI_OPERATION: rollout_id_string(operation) or semconv.GEN_AI_OPERATION_CHAT}
    model = rollout_id_string(request_model)
    if model is not None:
        attributes[semconv.GEN_AI_REQUEST_MODEL] = model
    return attributes


def model_call_result_attributes(
    response_model: Any, input_tokens: Any, output_tokens: Any, finish_reasons: Any
) -> dict[str, Any]:
    """A model call's answer (GenAI): the model that answered, its token counts and why it stopped
    (names and counts only, never content)."""
    attributes = usage_attributes(input_tokens, output_tokens)
    model = rollout_id_string(response_model)
    if model is not None:
        attributes[semconv.GEN_AI_RESPONSE_MODEL] = model
    if is_a(finish_reasons, (list, tuple)):
        reasons = [reason for reason in (rollout_id_string(value) for value in finish_reasons[:64]) if reason is not None]
        if reasons:
            attributes[semconv.GEN_AI_FINISH_REASONS] = reasons
    return attributes


def _strict_bool(value: Any) -> bool | None:
    return value if type(value) is bool else None


def _plain_value(value: Any) -> Any:
    """Any other attribute: a scalar or a list of scalars (checked again before it reaches a span)."""
    if type(value) in (str, bool, int, float):
        return value
    if is_a(value, str):
        return rollout_id_string(value)
    if is_a(value, (list, tuple)) and all(type(item) in (str, bool, int, float) for item in value):
        return list(value)
    return None


# The rule of each attribute SPEC names, whichever framework it comes from.
CONVERSIONS: Mapping[str, Callable[[Any], Any]] = {
    semconv.TASK_ID: render_task_id,
    semconv.TASK_INDEX: index_value,
    semconv.ROLLOUT_REPEAT: index_value,
    semconv.ROLLOUT_ATTEMPT: index_value,
    semconv.ROLLOUT_ID: rollout_id_string,
    semconv.AGENT_NAME: rollout_id_string,
    semconv.ROLLOUT_REWARD: numeric_reward,
    semconv.VERIFY_MASKED: _strict_bool,
    semconv.FAILURE_KIND: rollout_id_string,
    semconv.FRAMEWORK: rollout_id_string,
    semconv.ERROR_TYPE: rollout_id_string,
}


def convert(name: str, value: Any) -> Any:
    """``value`` by the rule of the attribute ``name`` (any other name: a scalar or a list of
    scalars), or None when it fails the rule."""
    return CONVERSIONS.get(name, _plain_value)(value)
