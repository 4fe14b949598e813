"""The package's own context propagation: ``inject`` at a client's request function, ``receive`` at
a server's request boundary (the NeMo Gym preset's targets), each a no-op where contrib's HTTP
instrumentation of that client or server is active. Real SDK, real propagators, real wrapt."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest
from opentelemetry import baggage, context, trace

from gym_instrument import Target, semconv
from gym_instrument.frameworks import FRAMEWORKS

CLIENT_SOURCE = '''
async def request(method, url, **kwargs):
    """NeMo Gym's one request function: returns the headers it would send."""
    return kwargs.get("headers")
'''

SERVER_SOURCE = '''
from opentelemetry import baggage, context, trace


class RequestResponseCycle:
    """uvicorn's request cycle: the scope on the instance, the application as the argument."""

    def __init__(self, headers):
        self.scope = {"type": "http", "headers": headers}

    async def run_asgi(self, app):
        current = context.get_current()
        return trace.get_current_span(current).get_span_context(), baggage.get_baggage("nemo.gym.rollout.id", current)
'''

TRACEPARENT = "00-5ce0e9a56015fec5aadfa328ae398115-ab54a98ceb1f0ad2-01"
NEMO_GYM = FRAMEWORKS["nemo_gym"].schema


@pytest.fixture
def client(make_module: Any, instrument: Any) -> Any:
    def build(**settings: Any) -> Any:
        name = make_module(CLIENT_SOURCE)
        instrument(targets=[Target(f"{name}:request", "inject", schema=NEMO_GYM)], **settings)
        return importlib.import_module(name)

    return build


def send(module: Any, telemetry: Any, **kwargs: Any) -> Any:
    """One request sent inside a span, with a rollout id in baggage; the headers it carries, and the span."""
    tracer = telemetry.tracer_provider.get_tracer("test")

    async def inside() -> Any:
        context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "3-1"))
        with tracer.start_as_current_span("gym.rollout.dispatch") as span:
            return await module.request("POST", "http://agent/run", **kwargs), span

    return asyncio.run(inside())


def test_a_request_carries_the_current_trace_context_and_baggage(client: Any, telemetry: Any) -> None:
    given = {"Content-Type": "application/json"}
    headers, span = send(client(), telemetry, headers=given)
    parent = span.get_span_context()
    assert headers["traceparent"].startswith(f"00-{parent.trace_id:032x}-{parent.span_id:016x}-")
    assert headers["baggage"] == "nemo.gym.rollout.id=3-1"
    assert headers["Content-Type"] == "application/json"
    assert given == {"Content-Type": "application/json"}  # a copy: the caller's object is not changed
    assert [s.name for s in telemetry.spans()] == ["gym.rollout.dispatch"]  # no span for the hop


def test_a_request_without_headers_gets_its_own(client: Any, telemetry: Any) -> None:
    headers, _ = send(client(), telemetry)
    assert set(headers) == {"traceparent", "baggage"}


def test_repeated_headers_of_a_multi_value_mapping_are_kept(client: Any, telemetry: Any) -> None:
    from multidict import CIMultiDict

    given = CIMultiDict([("Accept", "a"), ("Accept", "b")])
    headers, _ = send(client(), telemetry, headers=given)
    assert type(headers) is CIMultiDict and headers.getall("Accept") == ["a", "b"] and "traceparent" in headers
    assert list(given.items()) == [("Accept", "a"), ("Accept", "b")]  # the caller's object: unchanged


def test_headers_of_another_shape_are_left_as_given(client: Any, telemetry: Any) -> None:
    given = (("Accept", "a"),)
    headers, _ = send(client(), telemetry, headers=given)
    assert headers is given


def test_a_callers_own_traceparent_is_kept_and_never_doubled(client: Any, telemetry: Any) -> None:
    headers, _ = send(client(), telemetry, headers={"TraceParent": TRACEPARENT})
    assert headers == {"TraceParent": TRACEPARENT}


def test_the_setting_turns_injection_off(client: Any, telemetry: Any) -> None:
    headers, _ = send(client(propagation=False), telemetry, headers={"a": "b"})
    assert headers == {"a": "b"}


def test_the_setting_from_the_environment(client: Any, telemetry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_GYM_PROPAGATION", "false")
    headers, _ = send(client(), telemetry)
    assert headers is None


def test_nothing_is_injected_while_contribs_aiohttp_client_instrumentation_is_on(client: Any, telemetry: Any) -> None:
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    module = client()
    instrumentor = AioHttpClientInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        headers, _ = send(module, telemetry, headers={"a": "b"})
        assert headers == {"a": "b"}  # contrib's client span injects, once
    finally:
        instrumentor.uninstrument()
    headers, _ = send(module, telemetry, headers={"a": "b"})
    assert "traceparent" in headers  # switched off again: ours injects


# -- receive --------------------------------------------------------------------------------------


@pytest.fixture
def server(make_module: Any, instrument: Any) -> Any:
    def build(**settings: Any) -> Any:
        name = make_module(SERVER_SOURCE)
        instrument(targets=[Target(f"{name}:RequestResponseCycle.run_asgi", "receive")], **settings)
        return importlib.import_module(name)

    return build


HEADERS = [(b"host", b"x"), (b"traceparent", TRACEPARENT.encode()), (b"baggage", b"nemo.gym.rollout.id=7-0")]


def serve(module: Any, telemetry: Any, app: Any = None, headers: Any = HEADERS) -> Any:
    """The request handled inside another request's leftover context (uvicorn's keep-alive leak)."""
    tracer = telemetry.tracer_provider.get_tracer("test")

    async def inside() -> Any:
        context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "leaked"))
        with tracer.start_as_current_span("previous request"):
            return await module.RequestResponseCycle(headers).run_asgi(app)

    return asyncio.run(inside())


def test_a_request_runs_in_the_context_its_headers_carry(server: Any, telemetry: Any) -> None:
    span_context, rollout_id = serve(server(), telemetry)
    assert (span_context.trace_id, span_context.span_id) == (0x5CE0E9A56015FEC5AADFA328AE398115, 0xAB54A98CEB1F0AD2)
    assert span_context.is_remote
    assert rollout_id == "7-0"
    assert [s.name for s in telemetry.spans()] == ["previous request"]  # no span for the hop


def test_a_request_without_context_runs_isolated(server: Any, telemetry: Any) -> None:
    span_context, rollout_id = serve(server(), telemetry, headers=[(b"host", b"x")])
    assert not span_context.is_valid and rollout_id is None


def test_the_setting_leaves_the_boundary_isolating_only(server: Any, telemetry: Any) -> None:
    span_context, rollout_id = serve(server(propagation=False), telemetry)
    assert not span_context.is_valid and rollout_id is None


class Instrumented:
    """An application contrib's FastAPI instrumentation marked (``instrument_app``), behind a middleware."""

    _is_instrumented_by_opentelemetry = True


class Middleware:
    def __init__(self, app: Any) -> None:
        self.app = app


def test_nothing_is_extracted_where_contrib_instruments_the_application(server: Any, telemetry: Any) -> None:
    span_context, rollout_id = serve(server(), telemetry, app=Middleware(Instrumented()))
    assert not span_context.is_valid and rollout_id is None  # isolated: contrib's server span extracts


def test_nothing_is_extracted_behind_contribs_asgi_middleware(server: Any, telemetry: Any) -> None:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    span_context, _ = serve(server(), telemetry, app=Middleware(OpenTelemetryMiddleware(app)))
    assert not span_context.is_valid


def test_an_asgi_application_called_with_its_scope_is_a_boundary_too(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(
        "from opentelemetry import trace\n"
        "async def app(scope, receive, send):\n"
        "    return trace.get_current_span().get_span_context()\n"
    )
    instrument(targets=[Target(f"{name}:app", "receive")])
    module = importlib.import_module(name)
    span_context = asyncio.run(module.app({"type": "http", "headers": HEADERS}, None, None))
    assert span_context.span_id == 0xAB54A98CEB1F0AD2
    assert trace.get_current_span().get_span_context().is_valid is False
