"""``model_call``: one span per call of an agent to a model, made where the model server serves it.

Kind CLIENT (the server calls its model backend), named ``{gen_ai.operation.name}
{gen_ai.request.model}`` and attributed per OpenTelemetry's GenAI semantic conventions: the
operation and requested model from the request, the answering model, token counts and finish
reasons from the answer (read through the target's schema), ``error.type`` when it raises, and
the rollout id the baggage carries. Names and counts only, never a prompt or an answer. A model
call that calls another of the server's own (``responses`` converting to ``chat_completions``) is
one span: the nested call passes through.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from gym_instrument import semconv
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.record.job import JobContext
from gym_instrument.role.base import Role, RoleCall, rollout_id_in
from gym_instrument.schema.base import RolloutSchema


class ModelCallRole(Role):
    name = semconv.ROLE_MODEL_CALL
    # Each span is named from its request (open_span); this is the name of one that says no model.
    span_name = semconv.GEN_AI_OPERATION_CHAT
    span_kind = SpanKind.CLIENT
    row_names = ("body", "request")
    decorated = False

    def start_attributes(self, call: RoleCall, row: Any, current: Context) -> tuple[dict[str, Any], RolloutIdentity | None]:
        # The operation and model name the span, whatever the rules say: they are always read.
        attributes = call.schema.model_call_request(row)
        if call.defaults:
            rollout_id = rollout_id_in(current)
            if rollout_id is not None:
                attributes[semconv.ROLLOUT_ID] = rollout_id
        return attributes, None

    def open_span(
        self, call: RoleCall, tracer: trace.Tracer, job: JobContext | None, current: Context, attributes: dict[str, Any]
    ) -> Span:
        operation = attributes.get(semconv.GEN_AI_OPERATION, self.span_name)
        model = attributes.get(semconv.GEN_AI_REQUEST_MODEL)
        name = f"{operation} {model}" if model else str(operation)
        return tracer.start_span(name, context=current, kind=self.span_kind, attributes=attributes)

    def reads_result(self, schema: RolloutSchema) -> bool:
        return type(schema).model_call_attributes is not RolloutSchema.model_call_attributes

    def on_success(self, call: RoleCall, row: Any, result: Any) -> dict[str, Any]:
        return call.schema.model_call_attributes(result)
