"""Schema: how a framework names and scores its rollouts, field paths, and the attribute rules.

The public surface for writing a framework's schema (``frameworks/<name>/schema.py`` shows two)::

    from gym_instrument.schema import RolloutSchema, RolloutIdentity, field, index_value

The engine (``role``, ``plan``) reads rows, results and verdicts through a schema only, and knows
no framework's field names.
"""

from gym_instrument.link.identity import RolloutIdentity, index_form, parse_index_form
from gym_instrument.schema.base import GENERIC, GenericSchema, RolloutSchema
from gym_instrument.schema.extractors import Extractor, at_start
from gym_instrument.schema.fields import (
    MISSING,
    field,
    index_value,
    is_a,
    model_field_names,
    plain_str,
    render_task_id,
    rollout_id_string,
    task_id_of,
)
from gym_instrument.schema.rules import (
    VerdictFacts,
    VerdictName,
    checks_of,
    distinct_checks,
    identity_attributes,
    numeric_reward,
    outcome_attributes,
    verdict_attributes,
)

__all__ = [
    "GENERIC",
    "MISSING",
    "Extractor",
    "GenericSchema",
    "RolloutIdentity",
    "RolloutSchema",
    "VerdictFacts",
    "VerdictName",
    "at_start",
    "checks_of",
    "distinct_checks",
    "field",
    "identity_attributes",
    "index_form",
    "index_value",
    "is_a",
    "model_field_names",
    "numeric_reward",
    "outcome_attributes",
    "parse_index_form",
    "plain_str",
    "render_task_id",
    "rollout_id_string",
    "task_id_of",
    "verdict_attributes",
]
