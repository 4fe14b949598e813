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


def test_a_request_is_injected_while_contribs_aiohttp_client_instrumentation_is_on(client: Any, telemetry: Any) -> None:
    """Contrib skips some requests (a session made before its instrument(), an excluded URL): the
    headers carry the context all the same; a request contrib handles gets its client span's
    instead (see the tests over real HTTP below)."""
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    module = client()
    instrumentor = AioHttpClientInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        headers, span = send(module, telemetry, headers={"a": "b"})
    finally:
        instrumentor.uninstrument()
    assert headers["traceparent"].split("-")[2] == f"{span.get_span_context().span_id:016x}"


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


@pytest.fixture
def server_at(make_module: Any, instrument: Any) -> Any:
    """A request cycle whose scope has a path (``/verify``), for contrib's excluded URLs."""
    source = SERVER_SOURCE.replace('"headers": headers}', '"headers": headers, "path": "/verify"}')
    name = make_module(source)
    instrument(targets=[Target(f"{name}:RequestResponseCycle.run_asgi", "receive")])
    return importlib.import_module(name)


async def asgi_app(scope: Any, receive: Any, send: Any) -> None:
    return None


class Middleware:
    def __init__(self, app: Any) -> None:
        self.app = app


def test_nothing_is_extracted_where_contribs_middleware_makes_the_server_span(server_at: Any, telemetry: Any) -> None:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    application = Middleware(OpenTelemetryMiddleware(asgi_app, excluded_urls="healthz"))
    span_context, rollout_id = serve(server_at, telemetry, app=application)
    assert not span_context.is_valid and rollout_id is None  # isolated: contrib's server span extracts


def test_a_request_contribs_middleware_excludes_runs_in_its_own_context(server_at: Any, telemetry: Any) -> None:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    application = Middleware(OpenTelemetryMiddleware(asgi_app, excluded_urls="verify"))
    span_context, rollout_id = serve(server_at, telemetry, app=application)
    assert span_context.span_id == 0xAB54A98CEB1F0AD2 and rollout_id == "7-0"


def test_a_fastapi_application_is_contribs_by_its_built_middleware_stack(server_at: Any, telemetry: Any) -> None:
    from fastapi import FastAPI
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    application = FastAPI()
    FastAPIInstrumentor.instrument_app(application, tracer_provider=telemetry.tracer_provider, excluded_urls="verify")
    try:
        # Its stack not built yet (the lifespan off, a first request): contrib marked it, so it is contrib's.
        assert serve(server_at, telemetry, app=Middleware(application)) == (trace.INVALID_SPAN_CONTEXT, None)
        application.middleware_stack = application.build_middleware_stack()  # what its first call does
        span_context, rollout_id = serve(server_at, telemetry, app=Middleware(application))
        assert span_context.span_id == 0xAB54A98CEB1F0AD2 and rollout_id == "7-0"  # excluded by contrib: extracted
    finally:
        FastAPIInstrumentor.uninstrument_app(application)
    # Its stack rebuilt without contrib's middleware, the marker gone: the boundary extracts.
    span_context, _ = serve(server_at, telemetry, app=Middleware(application))
    assert span_context.span_id == 0xAB54A98CEB1F0AD2


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


# -- beside contrib, over real HTTP -------------------------------------------------------------
#
# A rollout dispatched in this process (real aiohttp, the package's inject target at its request
# function, contrib's aiohttp-client instrumentation switched on here) to a resources server in
# another (real uvicorn and FastAPI under opentelemetry-instrument, contrib's FastAPI instrumentation
# on, the preset's receive boundary), on 127.0.0.1. Contrib skips some requests; the context must
# reach the verify all the same, and a request never carries two traceparent headers.

ROLLOUT_SOURCE = '''
import aiohttp


async def request(session, method, url, **kwargs):
    """NeMo Gym's one request function; the server answers with how many traceparents it got."""
    async with session.request(method, url, **kwargs) as response:
        response.raise_for_status()
        return {**await response.json(), "traceparents": int(response.headers["x-traceparents"])}


async def rollout(row, session, url):
    return await request(session, "POST", url + "/verify", json={"answer": "B", "expected": "B"})
'''

ROW = {"_ng_task_index": 4, "_ng_rollout_index": 1}  # rollout "4-1": its verify request carries no id


@pytest.fixture(scope="module")
def resources_servers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two resources servers, each a real uvicorn under the launcher with contrib's FastAPI
    instrumentation: one whose contrib excludes another URL, one whose contrib excludes /verify."""
    import subprocess
    import sys

    from tests.otlp_receiver import OtlpReceiver
    from tests.test_crossprocess import LAUNCHER, ROOT, environment, free_port, wait_until_listening

    logs = tmp_path_factory.mktemp("resources")
    servers: dict[str, Any] = {}
    processes = []
    with OtlpReceiver() as receiver:
        try:
            for excluded in ("healthz", "verify"):
                port = free_port()
                targets = "tests.crossprocess.services:ResourcesServer.verify=verify@nemo_gym"
                env = {
                    **environment(receiver, f"resources-{excluded}", targets, "true"),
                    "OTEL_PYTHON_FASTAPI_EXCLUDED_URLS": excluded,
                }
                log = logs / f"{excluded}.log"
                command = [LAUNCHER, sys.executable, "-m", "uvicorn", "tests.crossprocess.services:resources_app", "--factory"]
                with log.open("wb") as out:
                    processes.append(
                        subprocess.Popen(
                            [*command, "--host", "127.0.0.1", "--port", str(port)],
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            cwd=ROOT,
                            start_new_session=True,
                        )
                    )
                wait_until_listening(port, processes[-1], log)
                servers[excluded] = f"http://127.0.0.1:{port}"
            yield receiver, servers
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)


def dispatch_over_http(make_module: Any, instrument: Any, telemetry: Any, url: str, contrib: str, monkeypatch: Any) -> Any:
    """One rollout dispatched to ``url``; ``contrib``: how contrib's aiohttp-client instrumentation
    meets it (``session before``: switched on after the session was made; ``excludes verify``: its
    excluded URLs name /verify; ``handles``: on before the session, nothing excluded)."""
    import aiohttp
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    name = make_module(ROLLOUT_SOURCE)
    instrument(targets=[f"{name}:rollout=dispatch@nemo_gym", f"{name}:request=inject@nemo_gym"])
    module = importlib.import_module(name)
    if contrib == "excludes verify":
        monkeypatch.setenv("OTEL_PYTHON_AIOHTTP_CLIENT_EXCLUDED_URLS", "verify")
    instrumentor = AioHttpClientInstrumentor()

    async def run() -> Any:
        if contrib == "session before":
            session = aiohttp.ClientSession()
            instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
        else:
            instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
            session = aiohttp.ClientSession()
        async with session:
            return await module.rollout(dict(ROW), session, url)

    try:
        return asyncio.run(run())
    finally:
        instrumentor.uninstrument()


_SEEN_VERIFIES: set[str] = set()  # the verify spans earlier tests of this module took


def verify_of(receiver: Any, service: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The verify span ``service`` made for this test's one request (the one no earlier test took),
    and every span received so far."""

    def new(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            s
            for s in spans
            if s["name"] == semconv.SPAN_VERIFY and s["service"] == service and s["span_id"] not in _SEEN_VERIFIES
        ]

    spans = receiver.wait_for(lambda spans: bool(new(spans)), timeout=60, what=f"a verify span from {service}")
    [verify] = new(spans)
    _SEEN_VERIFIES.add(verify["span_id"])
    return verify, spans


@pytest.mark.parametrize("contrib", ["session before", "excludes verify", "handles"])
def test_the_verify_joins_its_rollout_whatever_contribs_client_skips(
    resources_servers: Any, make_module: Any, instrument: Any, telemetry: Any, monkeypatch: Any, contrib: str
) -> None:
    receiver, servers = resources_servers
    result = dispatch_over_http(make_module, instrument, telemetry, servers["healthz"], contrib, monkeypatch)
    assert result["reward"] == 1.0
    assert result["traceparents"] == 1  # never two: contrib's client span's replaces the package's
    [dispatch] = telemetry.spans(semconv.SPAN_DISPATCH)
    trace_id = f"{dispatch.context.trace_id:032x}"
    verify, _ = verify_of(receiver, "resources-healthz")
    assert verify["trace_id"] == trace_id  # the verify is in its rollout's trace
    assert verify["attributes"][semconv.ROLLOUT_ID] == "4-1"  # from the rollout's baggage alone
    clients = [span for span in telemetry.spans() if span.kind is trace.SpanKind.CLIENT]

    # Contrib's span for the request (its name, "POST /verify"; it ends after the verify, and may
    # come in a later batch), a SERVER span: the boundary left the request to it (contrib makes an
    # INTERNAL one when a span is current already).
    def servers(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [s for s in spans if s["trace_id"] == trace_id and s["name"] == "POST /verify"]

    [server] = servers(receiver.wait_for(lambda spans: bool(servers(spans)), timeout=60, what="contrib's server span"))
    assert server["kind"] == trace.SpanKind.SERVER.value + 1  # (OTLP's enum is the API's + 1)
    if contrib == "handles":
        # The request carried contrib's client span's context: the server span is its child.
        [client_span] = clients
        assert server["parent_id"] == f"{client_span.context.span_id:016x}"
    else:
        assert clients == []  # contrib skipped it: the package's context, the dispatch's own
        assert server["parent_id"] == f"{dispatch.context.span_id:016x}"


@pytest.mark.parametrize("contrib", ["handles", "session before"])
def test_the_verify_joins_its_rollout_where_contribs_server_excludes_its_url(
    resources_servers: Any, make_module: Any, instrument: Any, telemetry: Any, monkeypatch: Any, contrib: str
) -> None:
    receiver, servers = resources_servers
    result = dispatch_over_http(make_module, instrument, telemetry, servers["verify"], contrib, monkeypatch)
    assert result["traceparents"] == 1
    [dispatch] = telemetry.spans(semconv.SPAN_DISPATCH)
    trace_id = f"{dispatch.context.trace_id:032x}"
    verify, spans = verify_of(receiver, "resources-verify")
    assert verify["trace_id"] == trace_id
    assert verify["attributes"][semconv.ROLLOUT_ID] == "4-1"
    # No server span (contrib excluded /verify, and FastAPI's own steps back beside contrib's
    # middleware): the verify's parent is the span whose context the request carried.
    assert [s for s in spans if s["trace_id"] == trace_id and s["service"] == "resources-verify"] == [verify]
    sender = [span for span in telemetry.spans() if span.kind is trace.SpanKind.CLIENT] or [dispatch]
    assert verify["parent_id"] == f"{sender[0].context.span_id:016x}"
