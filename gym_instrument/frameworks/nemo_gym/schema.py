"""How NeMo Gym names and scores its rollouts: its rows, native episodes, verify results and digests.

Every NeMo Gym field name the package reads is here, beside the preset's target table
(``preset.py``). It is also the schema of any target that names none: the attribute rules are written in NeMo Gym's
terms (``_ng_task_index``, ``reward``, ``mask_sample``, ``findings``). ``RUN_FILES`` says how a
finished run lays out its files, for ``gym-instrument replay``.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity, index_form, parse_index_form
from gym_instrument.record.attributes import INT64_MAX as _INT64_MAX
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.fields import (
    MISSING,
    field,
    holds_any,
    index_value,
    is_a,
    model_field_names,
    rollout_id_string,
    task_id_of,
)
from gym_instrument.schema.rules import (
    VerdictFacts,
    VerdictName,
    checks_of,
    distinct_checks,
    model_call_name_attributes,
    model_call_result_attributes,
    outcome_attributes,
    usage_attributes,
    verdict_attributes,
)

TASK_ID_FIELDS = ("task_id", "problem_id", "instance_id", "task_name")
# A verify request that has none of these carries no rollout id of its own.
REQUEST_ID_FIELDS = ("_ng_rollout_id", "capture_rollout_id", "_ng_task_index", "_ng_rollout_index")
# NeMo Gym's RolloutDigest (rollout_health): read directly when a verdict has all of these.
DIGEST_FIELDS = frozenset(("task_index", "rollout_index", "rollout_id", "verdict", "findings"))


def _model_lacks(request: Any, names: tuple[str, ...]) -> bool:
    """True when ``request`` is a pydantic model with none of ``names``: no field, computed field or extra."""
    try:
        model = type(request)
        fields = getattr(model, "__pydantic_fields__", None)
        if type(fields) is not dict:
            return False
        computed = getattr(model, "__pydantic_computed_fields__", None) or ()
        for name in names:
            if name in fields or name in computed:
                return False
        extra = request.__pydantic_extra__
        if extra is None:
            return True
        if type(extra) is not dict:
            return False
        for name in names:
            if name in extra:
                return False
        return True
    except Exception:
        return False


def _is_verdict(value: Any) -> bool:
    return any(field(value, name) is not MISSING for name in ("verdict", "rollout_id", "task_index", "_ng_task_index"))


def _verdict_name(verdict: Any) -> VerdictName:
    """A verdict's rollout id and (task index, rollout index); other index types match nothing."""
    task_index = field(verdict, "task_index")
    rollout_index = field(verdict, "rollout_index")
    if task_index is MISSING and rollout_index is MISSING:  # a rollout_verdicts.jsonl row
        task_index, rollout_index = field(verdict, "_ng_task_index"), field(verdict, "_ng_rollout_index")
    for value in (task_index, rollout_index):
        if value is not MISSING and value is not None and index_value(value) is None:
            return None, None, None  # not even through a bare "{task}-{rollout}" id beside them
    return rollout_id_string(field(verdict, "rollout_id")), index_value(task_index), index_value(rollout_index)


# A Responses API answer's status (and its incomplete reason) as a GenAI finish reason.
_FINISH_REASONS = {"completed": "stop", "max_output_tokens": "length", "content_filter": "content_filter", "failed": "error"}


# By type: whether its instances are HTTP responses whose body is read later (a ``read()`` method).
_RESPONSE_TYPES: dict[type, bool] = {}


def _is_response_type(kind: type) -> bool:
    """Whether ``kind`` is a response type (asked once per type: :data:`_RESPONSE_TYPES`)."""
    try:
        known = not issubclass(kind, (Mapping, str, bytes)) and callable(getattr(kind, "read", None))
    except Exception:
        known = False
    if len(_RESPONSE_TYPES) >= 1024:  # bounded, whatever classes a process makes
        _RESPONSE_TYPES.clear()
    _RESPONSE_TYPES[kind] = known
    return known


def _http_status(result: Any) -> int | None:
    """The status of an HTTP response the collector's ``ServerClient.post`` returned (aiohttp's
    ``ClientResponse``: an int ``status`` and a ``read()`` for its body); None for anything else.
    A rollout's own result (a dict, a pydantic model) is told apart by its type alone: getattr()
    on a model without the field would take pydantic's slow path (microseconds)."""
    kind = type(result)
    if kind is dict:  # a rollout's own result, parsed from JSON: the usual case, told at once
        return None
    response = _RESPONSE_TYPES.get(kind)
    if not (_is_response_type(kind) if response is None else response):
        return None
    try:
        status = getattr(result, "status", None)
        return status if type(status) is int else None
    except Exception:
        return None


# Where a rollout result keeps what _rollout_totals reads (a result with none of them has no totals).
_TOTALS_FIELDS = frozenset(("response", "result", "ng_trajectory"))


def _rollout_totals(body: Any) -> dict[str, Any]:
    """A rollout result's token totals: ``response.usage`` (a flat row's result, summed by NeMo Gym
    over the rollout's model calls), else ``result.usage`` or ``result.response.usage`` (a native
    episode's); and the number of model calls when ``ng_trajectory.model_calls`` (else
    ``result.ng_trajectory.model_calls``) lists them."""
    if not holds_any(body, _TOTALS_FIELDS):
        return {}  # (every dispatch's end asks: a result without them costs one test, not a lookup per field)
    episode: Any = None  # (read only when the flat row's own fields are absent)
    usage = field(field(body, "response"), "usage")
    if usage is MISSING or usage is None:
        episode = field(body, "result")
        usage = field(episode, "usage")
        if usage is MISSING or usage is None:
            usage = field(field(episode, "response"), "usage")
    attributes = (
        {} if usage is MISSING or usage is None else usage_attributes(field(usage, "input_tokens"), field(usage, "output_tokens"))
    )
    trajectory = field(body, "ng_trajectory")
    if trajectory is MISSING or trajectory is None:
        trajectory = field(field(body, "result") if episode is None else episode, "ng_trajectory")
    calls = field(trajectory, "model_calls")
    if is_a(calls, (list, tuple)) and calls:
        attributes[semconv.ROLLOUT_MODEL_CALLS] = len(calls)
    return attributes


class NemoGymSchema(RolloutSchema):
    name = "nemo_gym"
    # NeMo Gym 0.7.0's own telemetry (extra "telemetry") makes a gym.verify span around /verify.
    framework_spans = frozenset({semconv.SPAN_VERIFY})
    # The collector always posts a /run with its row as ``json``; 0.7.0's environment servers relay
    # a rollout to its agent as ``data=<bytes>``: a /run without a row is a relay.
    rowless_dispatch_relays = True
    # Gym's servers are FastAPI applications. FastAPI >= 0.165 makes its own request, operation and
    # serialization spans (and metrics and logs) whenever an SDK provider is set; it leaves a request
    # alone whose ASGI scope already has the key "fastapi.telemetry" (as when an outer FastAPI
    # application handles it). Older FastAPI never reads the key.
    quiet_server_scope = (("fastapi.telemetry", None),)

    def identity(self, row: Any) -> RolloutIdentity:
        """A flat row (``task_id``, ``_ng_task_index``, ``_ng_rollout_index``, ``_ng_attempt_index``,
        ``_ng_rollout_id``, ``agent_ref.name``) or 0.7.0's native episode body
        (``{"episode_id": {"rollout_id", "attempt"}, "task": {"task_id", ...}}``)."""
        if row is None:
            return RolloutIdentity()
        task_index = rollout_index = None
        custom_id = False
        # A row parsed from JSON is a plain dict: read it directly (absent and None mean the same here).
        read = row.get if type(row) is dict else partial(field, row)
        episode = read("episode_id")
        if episode is not MISSING and episode is not None and not is_a(episode, (str, int)):
            rollout_id = rollout_id_string(field(episode, "rollout_id"))
            attempt = index_value(field(episode, "attempt"))
            task = field(row, "task")
            task_id = None if task is MISSING else task_id_of(task, TASK_ID_FIELDS)
            if rollout_id is not None:
                parsed = parse_index_form(rollout_id)
                if parsed is None:
                    custom_id = True
                else:
                    task_index, rollout_index, parsed_attempt = parsed
                    if attempt is None:
                        attempt = parsed_attempt
        else:
            task_id = task_id_of(row, TASK_ID_FIELDS)
            task_index = index_value(read("_ng_task_index"))
            rollout_index = index_value(read("_ng_rollout_index"))
            attempt = index_value(read("_ng_attempt_index"))
            rollout_id = rollout_id_string(read("_ng_rollout_id"))
            if rollout_id is not None:
                custom_id = parse_index_form(rollout_id) is None
            elif task_index is not None and rollout_index is not None:
                rollout_id = index_form(task_index, rollout_index, attempt)
        agent = read("agent_ref")
        agent_name = None if agent is MISSING or agent is None else rollout_id_string(field(agent, "name"))
        return RolloutIdentity(task_id, task_index, rollout_index, attempt, rollout_id, custom_id, agent_name)

    def request_rollout_id(self, request: Any) -> str | None:
        if request is None:
            return None
        if type(request) is not dict and _model_lacks(request, REQUEST_ID_FIELDS):
            return None  # the flat-row path's request: looked up name by name it costs microseconds
        for name in ("_ng_rollout_id", "capture_rollout_id"):
            explicit = rollout_id_string(field(request, name))
            if explicit is not None:
                return explicit
        task_index = index_value(field(request, "_ng_task_index"))
        rollout_index = index_value(field(request, "_ng_rollout_index"))
        if task_index is None or rollout_index is None:
            return None
        return index_form(task_index, rollout_index, index_value(field(request, "_ng_attempt_index")))

    def dispatch_end_attributes(self, row: Any, result: Any) -> dict[str, Any]:
        """The collector's ``/run`` returns an HTTP response: a status >= 400 fails the dispatch
        (``error.type`` = the status); its body, read later (:meth:`body_read_later`), or a result a
        dispatch returns itself, gives the rollout's token totals."""
        status = _http_status(result)
        if status is not None:
            return {semconv.ERROR_TYPE: str(status)} if status >= 400 else {}
        return _rollout_totals(result)

    def body_read_later(self, result: Any) -> bool:
        """The collector reads a ``/run`` response's body (``get_response_json``) after the POST returned."""
        return _http_status(result) is not None

    def model_call_request(self, request: Any) -> dict[str, Any]:
        """A model server's ``/v1/responses`` or ``/v1/chat/completions`` request: its ``model``
        (both are chat operations in the GenAI conventions)."""
        return model_call_name_attributes(None, field(request, "model"))

    def model_call_attributes(self, response: Any) -> dict[str, Any]:
        """A Responses API answer (``usage.input_tokens`` / ``output_tokens``, ``status`` and
        ``incomplete_details.reason``) or a chat completion (``usage.prompt_tokens`` /
        ``completion_tokens``, each choice's ``finish_reason``)."""
        usage = field(response, "usage")
        choices = field(response, "choices")
        if is_a(choices, (list, tuple)):
            reasons = [field(choice, "finish_reason") for choice in choices[:64]]
            return model_call_result_attributes(
                field(response, "model"), field(usage, "prompt_tokens"), field(usage, "completion_tokens"), reasons
            )
        status = field(response, "status")
        reason = field(field(response, "incomplete_details"), "reason")
        finish = _FINISH_REASONS.get(reason if type(reason) is str else status) if is_a(status, str) else None
        return model_call_result_attributes(
            field(response, "model"),
            field(usage, "input_tokens"),
            field(usage, "output_tokens"),
            [finish] if finish is not None else None,
        )

    def result_attributes(self, result: Any) -> dict[str, Any]:
        """A verify response's ``reward``, ``mask_sample`` and ``failure_kind`` (or a bare number)."""
        kind = type(result)
        if kind is not bool and issubclass(kind, (int, float)):  # a bare number is the reward, masked or not
            attributes = outcome_attributes(result, None, None)
            if kind is not int and kind is not float:  # a subclass may carry the other two as attributes
                attributes.update(outcome_attributes(None, field(result, "mask_sample"), field(result, "failure_kind")))
            return attributes
        return outcome_attributes(field(result, "reward"), field(result, "mask_sample"), field(result, "failure_kind"))

    def run_files(self, config: Any) -> tuple[str | None, list[str]]:
        """A collection's or aggregation's config: ``output_jsonl_fpath``, and for an aggregation
        that merges (``merge_shards``, default true) the shards its ``input_glob`` matches, as
        ``gym eval aggregate`` expands it (comma-separated globs; sidecars are not shards)."""
        output = field(config, "output_jsonl_fpath")
        if not is_a(output, (str, os.PathLike)) or not os.fspath(output):
            return None, []
        output = os.fspath(output)
        input_glob = field(config, "input_glob")
        if type(input_glob) is not str or field(config, "merge_shards") is False:
            return output, []
        shards: dict[str, None] = {}
        for pattern in (part.strip() for part in input_glob.split(",")):
            for path in sorted(glob.glob(pattern)) if pattern else ():
                if not os.path.splitext(os.path.basename(path))[0].endswith(_SIDECARS):
                    shards.setdefault(path, None)
        return output, list(shards)

    def verdicts(self, result: Any) -> Sequence[Any]:
        """``.rollouts`` / ``["rollouts"]`` of a health result, a list of verdicts, or one verdict."""
        if is_a(result, (list, tuple)):
            return result  # type: ignore[no-any-return]
        rollouts = field(result, "rollouts")
        if is_a(rollouts, (list, tuple)):
            return rollouts  # type: ignore[no-any-return]
        if result is not None and _is_verdict(result):
            return (result,)
        return ()

    def verdict_facts(self, verdicts: Sequence[Any]) -> list[VerdictFacts]:
        """One pass over a health result's verdicts. NeMo Gym's ``RolloutDigest`` (a pydantic model with
        the digest fields, holding what they usually hold) is read directly; anything else field by field."""
        facts: list[VerdictFacts] = []
        append = facts.append
        kind: Any = None
        is_digest = False
        for verdict in verdicts:
            try:
                if type(verdict) is not kind:  # a result's digests share their class: looked up once
                    kind = type(verdict)
                    names = model_field_names(kind)
                    is_digest = names is not None and DIGEST_FIELDS <= names
                if is_digest:
                    task_index, rollout_index, rollout_id = verdict.task_index, verdict.rollout_index, verdict.rollout_id
                    name, findings = verdict.verdict, verdict.findings
                    if (
                        type(rollout_id) is str
                        and rollout_id.isascii()
                        and type(task_index) is int  # index_value(), for the two indices
                        and 0 <= task_index <= _INT64_MAX
                        and type(rollout_index) is int
                        and 0 <= rollout_index <= _INT64_MAX
                        and type(findings) is list
                    ):
                        # (a digest's findings are its Finding models: their checks read directly)
                        checks = distinct_checks([finding.check for finding in findings]) if findings else []
                        append(((rollout_id or None, task_index, rollout_index), verdict_attributes(name, checks)))
                        continue
            except Exception:
                kind = None
            try:
                attributes = verdict_attributes(field(verdict, "verdict"), checks_of(field(verdict, "findings")))
            except Exception:
                attributes = {semconv.HEALTH_CHECKS: []}
            append((_verdict_name(verdict), attributes))
        return facts


SCHEMA = NemoGymSchema()

# Files beside a shard that its glob matches and ``gym eval aggregate`` does not read as shards.
_SIDECARS = ("_failures", "_materialized_inputs")


class RunFiles:
    """How a NeMo Gym run leaves its facts on disk, for ``gym-instrument replay``: ``<stem>.jsonl`` (one
    row per rollout), ``<stem>_failures.jsonl`` (failed attempts), ``<stem>_materialized_inputs.jsonl``
    (the dispatched rows, with the dataset's task ids) and ``rollout_verdicts.jsonl`` (the health pass)."""

    verdicts = "rollout_verdicts.jsonl"
    failures_suffix = "_failures"
    materialized_suffix = "_materialized_inputs"
    failure_class = "_ng_failure_class"  # why a failed attempt failed
    dispatch_drained = "_ng_dispatch_drained"  # an attempt cancelled when the run was drained
    native_task_id = "_ng_task_id"  # on the output rows of native episodes only
    latency_ms = ("ng_perf", "total_latency_ms")  # how long the rollout took (0.7.0, observability on)
    started_at = ("response", "created_at")  # when the model answered (seconds since the epoch)
    row_keys = ("_ng_task_index", "reward")  # a rollout row has one of these


RUN_FILES = RunFiles()
