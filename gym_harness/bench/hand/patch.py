"""The ``hand`` configuration's telemetry: what the package exports in a NeMo Gym 0.7.0 run, written by hand.

Runs inside the NeMo Gym venv only (OpenTelemetry and NeMo Gym are imported from there); the
harness never imports it. ``gym_harness.bench.hand`` copies it into that venv's site-packages as
``_gym_bench_hand`` with a ``.pth`` line that calls :func:`arm` at every interpreter's start when
``GYM_BENCH_HAND`` is set, and removes both after the run. Nothing on disk of NeMo Gym is changed.

The spans, attributes and metrics are the ``gym`` configuration's (this package's NeMo Gym preset), made
the way a NeMo Gym maintainer would write them in-tree, each at the place that code would have them:

- ``gym.rollout.dispatch`` in the collector, around the ``/run`` POST, ended by the read of its body
  with the rollout's token totals (in-tree, a ``with`` block in ``_post_subroutine``; here the POST
  and the read are two functions, so the open span waits between them in a dict);
- the rollout id as W3C baggage beside the dispatch span, injected with ``traceparent`` into the
  headers of ``nemo_gym.server_utils.request`` (the docstring's "only place Gym talks to another
  server") and extracted at each server's request boundary by a small ASGI middleware that
  ``SimpleServer.instrument_app_for_telemetry`` adds (where 0.7.0 instruments its apps);
- ``gym.verify`` in ``traced_verify_endpoint`` (0.7.0's own wrapper of ``/verify``), with the reward,
  the masked flag and the rollout id from the baggage, and ``gym.rollout.rewarded_total``;
- the model-call span (``chat``, kind CLIENT) with OpenTelemetry's GenAI attributes around
  ``SimpleResponsesAPIModel._invoke_responses`` / ``_invoke_chat_completions`` (the dispatch every
  model server's ``/v1/responses`` and ``/v1/chat/completions`` share);
- one ``gym.rollout.health`` per verdict of ``run_health_checks``, a child of its ended dispatch;
- FastAPI's own telemetry off in every Gym application, as ``FastAPI(telemetry={...})`` would say
  where Gym builds them (the ``gym`` configuration's ``OTEL_PYTHON_GYM_SERVER_TELEMETRY=false``).

Flat rows only (the whole run's mcqa rows): a native episode body is not read. Not done here, because
the package's spans and attributes do not depend on it: persisted links for a health pass in another
process (the package writes them beside the run's output), a bounded memory of dispatches, and the
package's guards (extractors that log instead of raising, OTLP-safe values).
"""

from __future__ import annotations

import functools
import os
import sys

TYPE_CHECKING = False  # typing is not imported at an interpreter's start for annotations alone
if TYPE_CHECKING:
    from typing import Any

ACTIVE_VAR = "GYM_BENCH_HAND"  # the .pth line arms the patches only where this is set

FRAMEWORK = "nemo_gym"
ROLLOUT_ID = "nemo.gym.rollout.id"
ERROR_TYPE = "error.type"
# A Responses API answer's status (and its incomplete reason) as a GenAI finish reason.
_INFINITY = float("inf")
FINISH_REASONS = {"completed": "stop", "max_output_tokens": "length", "content_filter": "content_filter", "failed": "error"}

# The collector's dispatches waiting for their /run response's body, by the response's id(); and each
# ended dispatch's span context and rollout id by (task index, rollout index), the latest attempt's, for
# its health verdict.
_READING: dict[int, tuple[Any, dict[str, Any]]] = {}
_DISPATCHED: dict[tuple[Any, Any], tuple[Any, str | None]] = {}


class _Telemetry:
    """The tracer and the counters, made when the first NeMo Gym module is patched (after the launcher set
    the providers up), as in-tree code makes them at its module's import."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        self.tracer = trace.get_tracer("nemo_gym")
        meter = metrics.get_meter("nemo_gym")
        self.rewarded = meter.create_counter(
            "gym.rollout.rewarded_total", unit="{rollout}", description="Rollouts a verify put a numeric, unmasked reward on"
        )
        self.dispatches = meter.create_counter(
            "gym.rollout.dispatches", unit="{rollout}", description="Rollout dispatches by outcome (ok, error, cancelled)"
        )
        self.verdicts = meter.create_counter(
            "gym.rollout.verdicts", unit="{rollout}", description="Health verdicts of traced rollouts by verdict"
        )


_TELEMETRY: list[_Telemetry] = []


def _telemetry() -> _Telemetry:
    if not _TELEMETRY:
        _TELEMETRY.append(_Telemetry())
    return _TELEMETRY[0]


def dispatch_attributes(row: dict[str, Any]) -> dict[str, Any]:
    """A flat row's identity: task id, indices, rollout id, agent."""
    attributes: dict[str, Any] = {"nemo.gym.framework": FRAMEWORK}
    task_id = row.get("task_id")
    if task_id is not None and task_id != "":
        if isinstance(task_id, (dict, list)):
            import json

            attributes["nemo.gym.task.id"] = json.dumps(task_id, sort_keys=True, separators=(",", ":"))
        else:
            attributes["nemo.gym.task.id"] = str(task_id)
    task_index, rollout_index, attempt = row.get("_ng_task_index"), row.get("_ng_rollout_index"), row.get("_ng_attempt_index")
    if type(rollout_index) is int:
        attributes["nemo.gym.rollout.repeat"] = rollout_index
    if type(task_index) is int:
        attributes["nemo.gym.task.index"] = task_index
    if type(attempt) is int:
        attributes["nemo.gym.rollout.attempt"] = attempt
    rollout_id = row.get("_ng_rollout_id")
    if not rollout_id and type(task_index) is int and type(rollout_index) is int:
        rollout_id = f"{task_index}-{rollout_index}" + (f"-a{attempt}" if type(attempt) is int and attempt > 0 else "")
    if rollout_id:
        attributes[ROLLOUT_ID] = str(rollout_id)
    agent = row.get("agent_ref")
    if isinstance(agent, dict) and agent.get("name"):
        attributes["nemo.gym.agent.name"] = str(agent["name"])
    return attributes


def token_totals(result: Any) -> dict[str, Any]:
    """A /run result's usage, summed by NeMo Gym over the rollout's model calls, and its model calls when listed."""
    attributes: dict[str, Any] = {}
    if not isinstance(result, dict):
        return attributes
    response = result.get("response")
    usage = response.get("usage") if isinstance(response, dict) else None
    if isinstance(usage, dict):
        for key, name in (("input_tokens", "gen_ai.usage.input_tokens"), ("output_tokens", "gen_ai.usage.output_tokens")):
            if type(usage.get(key)) is int:
                attributes[name] = usage[key]
    trajectory = result.get("ng_trajectory")
    calls = trajectory.get("model_calls") if isinstance(trajectory, dict) else None
    if isinstance(calls, list) and calls:
        attributes["nemo.gym.rollout.model_calls"] = len(calls)
    return attributes


def verify_outcome(result: Any) -> dict[str, Any]:
    """A verify response's reward (numeric, finite, unmasked only), masked flag and failure kind."""
    attributes: dict[str, Any] = {}
    masked = getattr(result, "mask_sample", None)
    if type(masked) is bool:
        attributes["nemo.gym.verify.masked"] = masked
    reward = getattr(result, "reward", None)
    if masked is not True and type(reward) in (int, float) and -_INFINITY < reward < _INFINITY:
        attributes["nemo.gym.rollout.reward"] = float(reward)
    failure_kind = getattr(result, "failure_kind", None)
    if isinstance(failure_kind, str) and failure_kind:
        attributes["nemo.gym.failure_kind"] = failure_kind
    return attributes


def answer_attributes(answer: Any) -> dict[str, Any]:
    """A model's answer: the model that answered, its token counts, why it stopped (a Responses answer or a chat completion)."""
    attributes: dict[str, Any] = {}
    model = getattr(answer, "model", None)
    if isinstance(model, str) and model:
        attributes["gen_ai.response.model"] = model
    usage = getattr(answer, "usage", None)
    choices = getattr(answer, "choices", None)
    if isinstance(choices, list):
        counts = (getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None))
        reasons = [choice.finish_reason for choice in choices if isinstance(getattr(choice, "finish_reason", None), str)]
    else:
        counts = (getattr(usage, "input_tokens", None), getattr(usage, "output_tokens", None))
        incomplete = getattr(getattr(answer, "incomplete_details", None), "reason", None)
        finish = FINISH_REASONS.get(incomplete if isinstance(incomplete, str) else getattr(answer, "status", None) or "")
        reasons = [finish] if finish else []
    for name, count in zip(("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"), counts, strict=True):
        if type(count) is int:
            attributes[name] = count
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    return attributes


def _failed(span: Any, error: BaseException) -> str:
    """Record ``error`` on ``span`` as the package does; the dispatch's outcome."""
    import asyncio

    from opentelemetry.trace import Status, StatusCode

    if isinstance(error, (asyncio.CancelledError, GeneratorExit)):
        span.set_attribute(ERROR_TYPE, "cancelled")
        return "cancelled"
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR))
    span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
    return "error"


def _end_dispatch(span: Any, attributes: dict[str, Any], outcome: str) -> None:
    span.end()
    _telemetry().dispatches.add(1, {"outcome": outcome})
    if outcome == "ok":
        key = (attributes.get("nemo.gym.task.index"), attributes.get("nemo.gym.rollout.repeat"))
        if None not in key:
            _DISPATCHED[key] = (span.get_span_context(), attributes.get(ROLLOUT_ID))


def patch_server_utils(module: Any) -> None:
    """The client side of every hop, the collector's dispatch, and each server's request boundary."""
    from opentelemetry import baggage, context, propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import Getter

    telemetry = _telemetry()
    original_request = module.request

    @functools.wraps(original_request)
    async def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        headers = kwargs.get("headers")
        headers = dict(headers) if headers else {}
        propagate.inject(headers)
        kwargs["headers"] = headers
        return await original_request(method, url, *args, **kwargs)

    module.request = request

    original_post = module.ServerClient.post

    @functools.wraps(original_post)
    async def post(self: Any, server_name: str, url_path: str, **kwargs: Any) -> Any:
        row = kwargs.get("json")
        if url_path != "/run" or not isinstance(row, dict):  # (an environment server relays /run as bytes)
            return await original_post(self, server_name, url_path, **kwargs)
        attributes = dispatch_attributes(row)
        span = telemetry.tracer.start_span("gym.rollout.dispatch", attributes=attributes)
        carried = trace.set_span_in_context(span)
        if ROLLOUT_ID in attributes:
            carried = baggage.set_baggage(ROLLOUT_ID, attributes[ROLLOUT_ID], carried)
        token = context.attach(carried)
        try:
            response = await original_post(self, server_name, url_path, **kwargs)
        except BaseException as error:
            _end_dispatch(span, attributes, _failed(span, error))
            raise
        finally:
            context.detach(token)
        if response.status >= 400:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.set_attribute(ERROR_TYPE, str(response.status))
            _end_dispatch(span, attributes, "error")
        else:
            _READING[id(response)] = (span, attributes)  # the collector reads the body next: that ends it
        return response

    module.ServerClient.post = post

    empty = Context()

    class ScopeHeaders(Getter[list[tuple[bytes, bytes]]]):
        def get(self, carrier: list[tuple[bytes, bytes]], key: str) -> list[str] | None:
            name = key.encode("latin-1")
            values = [value.decode("latin-1") for header, value in carrier if header == name]
            return values or None

        def keys(self, carrier: list[tuple[bytes, bytes]]) -> list[str]:
            return [header.decode("latin-1") for header, _ in carrier]

    scope_headers = ScopeHeaders()

    class TraceContextMiddleware:
        """Each request runs in the trace context and baggage its own headers carry, from an empty context
        (uvicorn can start a keep-alive connection's next request inside the previous one's)."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await self.app(scope, receive, send)
                return
            token = context.attach(propagate.extract(scope["headers"], context=empty, getter=scope_headers))
            try:
                await self.app(scope, receive, send)
            finally:
                context.detach(token)

    def serve_traced(app: Any) -> None:
        # FastAPI(telemetry={"tracing": False, "metrics": False, "logs": False}) where Gym builds the
        # application: FastAPI's NativeTelemetry reads this same dict at each request.
        settings = getattr(app, "_telemetry", None)
        if isinstance(settings, dict):
            settings.update(tracing=False, metrics=False, logs=False)
        app.add_middleware(TraceContextMiddleware)

    original_instrument = module.SimpleServer.instrument_app_for_telemetry

    @functools.wraps(original_instrument)
    def instrument_app_for_telemetry(self: Any, app: Any) -> None:
        serve_traced(app)
        original_instrument(self, app)

    module.SimpleServer.instrument_app_for_telemetry = instrument_app_for_telemetry

    original_head = module.HeadServer.setup_webserver

    @functools.wraps(original_head)
    def setup_head_webserver(self: Any) -> Any:
        app = original_head(self)
        serve_traced(app)
        return app

    module.HeadServer.setup_webserver = setup_head_webserver


def patch_rollout_collection(module: Any) -> None:
    """The collector's read of a /run response's body ends its dispatch with the rollout's token totals."""
    _telemetry()
    original_read = module.get_response_json

    @functools.wraps(original_read)
    async def get_response_json(response: Any) -> Any:
        waiting = _READING.pop(id(response), None)
        if waiting is None:
            return await original_read(response)
        span, attributes = waiting
        try:
            result = await original_read(response)
        except BaseException as error:
            _end_dispatch(span, attributes, _failed(span, error))
            raise
        span.set_attributes(token_totals(result))
        _end_dispatch(span, attributes, "ok")
        return result

    module.get_response_json = get_response_json


def patch_resources_server(module: Any) -> None:
    """``gym.verify`` inside 0.7.0's own ``/verify`` wrapper, which every resources server's route goes through."""
    from opentelemetry import baggage

    telemetry = _telemetry()
    original_traced = module.traced_verify_endpoint

    def traced_verify_endpoint(handler: Any, static_attributes: Any = None) -> Any:
        @functools.wraps(handler)
        async def verify(*args: Any, **kwargs: Any) -> Any:
            attributes = {"nemo.gym.framework": FRAMEWORK}
            rollout_id = baggage.get_baggage(ROLLOUT_ID)
            if rollout_id is not None:
                attributes[ROLLOUT_ID] = str(rollout_id)
            with telemetry.tracer.start_as_current_span("gym.verify", attributes=attributes) as span:
                try:
                    result = await handler(*args, **kwargs)
                except Exception as error:
                    span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
                    raise
                outcome = verify_outcome(result)
                span.set_attributes(outcome)
                if "nemo.gym.rollout.reward" in outcome:
                    telemetry.rewarded.add(1)
                return result

        return original_traced(verify, static_attributes)

    module.traced_verify_endpoint = traced_verify_endpoint


def patch_model_server(module: Any) -> None:
    """One CLIENT span per model call, in the dispatch every model server's endpoints share."""
    from opentelemetry import baggage
    from opentelemetry.trace import SpanKind

    telemetry = _telemetry()

    def traced(invoke: Any) -> Any:
        @functools.wraps(invoke)
        async def model_call(self: Any, request: Any, params: Any) -> Any:
            model = getattr(params, "model", None)
            attributes = {"gen_ai.operation.name": "chat", "nemo.gym.framework": FRAMEWORK}
            if isinstance(model, str) and model:
                attributes["gen_ai.request.model"] = model
            rollout_id = baggage.get_baggage(ROLLOUT_ID)
            if rollout_id is not None:
                attributes[ROLLOUT_ID] = str(rollout_id)
            name = f"chat {attributes['gen_ai.request.model']}" if "gen_ai.request.model" in attributes else "chat"
            with telemetry.tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
                try:
                    answer = await invoke(self, request, params)
                except Exception as error:
                    span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
                    raise
                span.set_attributes(answer_attributes(answer))
                return answer

        return model_call

    model = module.SimpleResponsesAPIModel
    model._invoke_responses = traced(model._invoke_responses)
    model._invoke_chat_completions = traced(model._invoke_chat_completions)


def patch_rollout_health(module: Any) -> None:
    """One ``gym.rollout.health`` per verdict, a child of its rollout's ended dispatch (the latest attempt's)."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan

    telemetry = _telemetry()
    original_checks = module.run_health_checks

    @functools.wraps(original_checks)
    def run_health_checks(*args: Any, **kwargs: Any) -> Any:
        result = original_checks(*args, **kwargs)
        for digest in result.rollouts:
            dispatched = _DISPATCHED.pop((digest.task_index, digest.rollout_index), None)
            if dispatched is None:
                continue
            span_context, rollout_id = dispatched
            attributes: dict[str, Any] = {
                "nemo.gym.health.verdict": str(digest.verdict),
                "nemo.gym.health.checks": sorted({finding.check for finding in digest.findings}),
            }
            if rollout_id is not None:
                attributes[ROLLOUT_ID] = rollout_id
            parent = trace.set_span_in_context(NonRecordingSpan(span_context))
            telemetry.tracer.start_span("gym.rollout.health", context=parent, attributes=attributes).end()
            telemetry.verdicts.add(1, {"verdict": str(digest.verdict)})
        return result

    module.run_health_checks = run_health_checks


PATCHES = {
    "nemo_gym.server_utils": patch_server_utils,
    "nemo_gym.rollout_collection": patch_rollout_collection,
    "nemo_gym.base_resources_server": patch_resources_server,
    "nemo_gym.base_responses_api_model": patch_model_server,
    "nemo_gym.rollout_health": patch_rollout_health,
}


class _PatchOnImport:
    """A meta path finder that finds nothing itself: the spec of a module of PATCHES comes from the finders
    after it, its loader's ``exec_module`` then patches the module right after running it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # (each module's spec has a loader of its own)
        return spec


def arm() -> None:
    """Patch each NeMo Gym module as it is imported (at once when it already is). Idempotent: a venv's
    site-packages can be read twice at start-up (``lib`` and its ``lib64`` link), and its ``.pth`` with it."""
    if not os.environ.get(ACTIVE_VAR) or any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _PatchOnImport())
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
