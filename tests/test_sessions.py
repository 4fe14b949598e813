"""An environment behind a WebSocket session (OpenEnv's shape): the rollout's context travels in the
session's opening handshake (``inject`` at websockets' ``connect``), the server's ASGI application
runs the whole session in it (``receive``), and the work the server hands to an executor thread
keeps it (``hand_off``), so a verify on the environment's ``step`` lands in its dispatch's trace.

Real websockets client, real uvicorn serving a real FastAPI application on 127.0.0.1 (in a thread of
this process: its event loop and its contexts are its own; only the handshake joins the two), real
SDK, wrapt and propagators; the targets are configuration alone.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from opentelemetry import baggage, context, trace

from gym_instrument import semconv

pytest.importorskip("websockets")
uvicorn = pytest.importorskip("uvicorn")

SERVER_SOURCE = '''
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from opentelemetry import baggage, context


class BoardBroken(Exception):
    """What the environment raises on a move it cannot make."""


class CountingEnv:
    """One session's environment: a move's reward is a tenth of it; a negative move raises."""

    def __init__(self):
        self.moves = []

    def step(self, move):
        if move < 0:
            raise BoardBroken(f"no square {move}")
        self.moves.append(move)
        return {"reward": move / 10, "done": len(self.moves) >= 3}


SEEN = []  # (path, the headers of the session's handshake, as the application saw them)


async def serve(websocket, step):
    """One session, one environment: each frame a move, answered with its observation or its error."""
    await websocket.accept()
    SEEN.append((websocket.url.path, [(name.decode(), value.decode()) for name, value in websocket.scope["headers"]]))
    env = CountingEnv()
    try:
        while True:
            message = json.loads(await websocket.receive_text())
            if message["type"] == "close":
                break
            try:
                observation = await step(env, message["move"])
            except Exception as error:
                await websocket.send_text(json.dumps({"error": type(error).__name__}))
            else:
                await websocket.send_text(json.dumps(observation))
    except WebSocketDisconnect:
        pass


async def in_an_executor(websocket: WebSocket):
    """Each step in the session's own executor thread, as OpenEnv's server runs Environment.step."""
    executor = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    try:
        await serve(websocket, lambda env, move: loop.run_in_executor(executor, lambda: env.step(move)))
    finally:
        executor.shutdown(wait=False)


async def inline(env, move):
    await asyncio.sleep(0)  # other sessions' frames run between this session's
    return env.step(move)


async def in_the_session(websocket: WebSocket):
    """Each step in the session's own task, between awaits."""
    await serve(websocket, inline)


def make_app(telemetry):
    """The application; ``telemetry``: FastAPI's own (0.165 and later), off unless given."""
    try:
        app = FastAPI(telemetry=telemetry or {"tracing": False, "metrics": False, "logs": False})
    except TypeError:  # a FastAPI without telemetry of its own
        app = FastAPI()
    app.add_api_websocket_route("/ws", in_an_executor)
    app.add_api_websocket_route("/inline", in_the_session)
    return app
'''

CLIENT_SOURCE = '''
import json

from websockets.asyncio.client import connect


async def run_episode(task, repeat, url, moves, headers=None):
    """A user's episode: one session, one frame per move; an error frame raises."""
    rewards = []
    async with connect(url, additional_headers=headers) if headers is not None else connect(url) as session:
        for move in moves:
            await session.send(json.dumps({"type": "step", "move": move}))
            answer = json.loads(await session.recv())
            if "error" in answer:
                raise RuntimeError(answer["error"])
            rewards.append(answer["reward"])
        await session.send(json.dumps({"type": "close"}))
    return rewards
'''

DISPATCH_START = {
    "nemo.gym.task.id": "row.task_id",
    "nemo.gym.rollout.repeat": "arg.repeat",
    "nemo.gym.rollout.id": {"template": "{task_id}-r{repeat}"},
}
INJECT = {"path": "websockets.asyncio.client:connect.__init__", "role": "inject", "row": "additional_headers"}
RECEIVE = {"path": "starlette.applications:Starlette.__call__", "role": "receive"}
HAND_OFF = {"path": "concurrent.futures.thread:ThreadPoolExecutor.submit", "role": "hand_off"}
# Two episodes at once, three moves each: every (episode, move) has its own reward.
EPISODES = {("maze", 0): [1, 2, 3], ("maze", 1): [4, 5, 6]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """The server module, served by uvicorn on 127.0.0.1 in a thread of its own, and the client module."""

    def __init__(self, server: Any, client: Any, url: str) -> None:
        self.server, self.client, self.url = server, client, url

    def play(self, episodes: dict[tuple[str, int], list[int]], path: str = "/ws", **kwargs: Any) -> dict[Any, Any]:
        """Every episode at once, each in its own session; what each returned or raised."""

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(
                *(
                    self.client.run_episode({"task_id": task}, repeat, self.url + path, moves, **kwargs)
                    for (task, repeat), moves in episodes.items()
                ),
                return_exceptions=True,
            )

        return dict(zip(episodes, asyncio.run(all_at_once()), strict=True))


@pytest.fixture
def served(make_module: Any, instrument: Any) -> Iterator[Any]:
    """``served(*targets)``: the targets (besides the client's dispatch and the server's verify) instrumented,
    the server started; stopped afterwards."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(*targets: dict[str, Any], verify: bool = True, fastapi_telemetry: Any = None) -> Served:
        server_name, client_name = make_module(SERVER_SOURCE), make_module(CLIENT_SOURCE)
        declared = [
            {"path": f"{client_name}:run_episode", "role": "dispatch", "row": "task", "start": DISPATCH_START},
            *targets,
        ]
        if verify:
            declared.append({"path": f"{server_name}:CountingEnv.step", "role": "verify", "row": "move"})
        instrument(config={"targets": declared})
        server = importlib.import_module(server_name)
        port = _free_port()
        app = server.make_app(fastapi_telemetry)
        uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=uvicorn_server.run, daemon=True)
        thread.start()
        started.append((uvicorn_server, thread))
        for _ in range(600):
            if uvicorn_server.started:
                break
            threading.Event().wait(0.05)
        assert uvicorn_server.started, "uvicorn did not start"
        return Served(server, importlib.import_module(client_name), f"ws://127.0.0.1:{port}")

    yield start
    for uvicorn_server, thread in started:
        uvicorn_server.should_exit = True
        thread.join(timeout=30)


def _hex(span_id: int) -> str:
    return f"{span_id:016x}"


def check_every_verify_in_its_rollouts_trace(telemetry: Any, episodes: dict[tuple[str, int], list[int]]) -> None:
    """One dispatch per episode; one verify per move, a child of its episode's dispatch (same trace,
    its parent the dispatch span), with the episode's rollout id and the move's reward."""
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    assert sorted(dispatches) == sorted(f"{task}-r{repeat}" for task, repeat in episodes)
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == sum(len(moves) for moves in episodes.values())
    for (task, repeat), moves in episodes.items():
        dispatch = dispatches[f"{task}-r{repeat}"]
        mine = [span for span in verifies if span.parent is not None and span.parent.span_id == dispatch.context.span_id]
        assert [span.context.trace_id for span in mine] == [dispatch.context.trace_id] * len(moves)
        assert [span.attributes.get(semconv.ROLLOUT_ID) for span in mine] == [f"{task}-r{repeat}"] * len(moves)
        assert sorted(span.attributes.get(semconv.ROLLOUT_REWARD) for span in mine) == [move / 10 for move in moves]


def test_every_verify_a_server_runs_in_an_executor_lands_in_its_rollouts_trace(served: Any, telemetry: Any) -> None:
    session = served(INJECT, RECEIVE, HAND_OFF)
    results = session.play(EPISODES)
    assert results == {episode: [move / 10 for move in moves] for episode, moves in EPISODES.items()}
    check_every_verify_in_its_rollouts_trace(telemetry, EPISODES)
    # No span for the session, the handshake or the hand-off: only what was configured.
    assert {span.name for span in telemetry.spans()} == {semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY}


def test_every_frame_of_a_session_runs_in_the_context_of_its_handshake(served: Any, telemetry: Any) -> None:
    """The steps run in the session's own task, interleaved with another session's frames."""
    session = served(INJECT, RECEIVE)
    session.play(EPISODES, path="/inline")
    check_every_verify_in_its_rollouts_trace(telemetry, EPISODES)


def test_a_step_that_raises_in_the_server_fails_its_verify_with_the_servers_exception(served: Any, telemetry: Any) -> None:
    session = served(INJECT, RECEIVE, HAND_OFF)
    results = session.play({("maze", 0): [1, -1, 3]})
    assert isinstance(results[("maze", 0)], RuntimeError)  # what the client saw: the server's error frame
    [dispatch] = telemetry.spans(semconv.SPAN_DISPATCH)
    assert dispatch.status.status_code is trace.StatusCode.ERROR
    assert dispatch.attributes[semconv.ERROR_TYPE] == "RuntimeError"
    verifies = sorted(telemetry.spans(semconv.SPAN_VERIFY), key=lambda span: span.start_time or 0)
    assert [span.context.trace_id for span in verifies] == [dispatch.context.trace_id] * 2
    assert [span.status.status_code for span in verifies] == [trace.StatusCode.UNSET, trace.StatusCode.ERROR]
    assert verifies[1].attributes[semconv.ERROR_TYPE] == f"{session.server.__name__}.BoardBroken"  # the server's own
    assert verifies[1].attributes[semconv.ROLLOUT_ID] == "maze-r0"


def test_a_session_is_received_once_inside_fastapis_own_server_span(served: Any, telemetry: Any) -> None:
    """FastAPI's own telemetry (0.165 and later) makes the session's server span between FastAPI.__call__
    and Starlette.__call__, both reached by the one receive target: the session is received at the
    first, so the verifies are descendants of FastAPI's span (its endpoint span between), itself a
    child of the dispatch."""
    import fastapi

    if tuple(int(part) for part in fastapi.__version__.split(".")[:2]) < (0, 165):
        pytest.skip("FastAPI makes no spans of its own before 0.165")
    own = {"tracer_provider": telemetry.tracer_provider, "metrics": False, "logs": False}
    session = served(INJECT, RECEIVE, HAND_OFF, fastapi_telemetry=own)
    session.play({("maze", 0): [1, 2]})
    [dispatch] = telemetry.spans(semconv.SPAN_DISPATCH)
    [server_span] = [span for span in telemetry.spans() if span.kind is trace.SpanKind.SERVER]
    assert server_span.parent is not None and server_span.parent.span_id == dispatch.context.span_id
    parents = {span.context.span_id: span.parent.span_id for span in telemetry.spans() if span.parent}

    def ancestors(span_id: int) -> list[int]:
        chain = []
        while span_id in parents:
            span_id = parents[span_id]
            chain.append(span_id)
        return chain

    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 2
    for verify in verifies:
        assert ancestors(verify.context.span_id)[-2:] == [server_span.context.span_id, dispatch.context.span_id]
        assert verify.attributes[semconv.ROLLOUT_ID] == "maze-r0"


def test_the_handshake_carries_the_context_and_the_callers_headers_unchanged(served: Any, telemetry: Any) -> None:
    from websockets.datastructures import Headers

    session = served(INJECT, verify=False)
    given = {"x-user": "7"}
    multi = Headers([("x-tag", "a"), ("x-tag", "b")])
    session.play({("maze", 0): [1]}, headers=given)
    session.play({("maze", 1): [1]}, headers=multi)
    session.play({("maze", 2): [1]})  # no headers of the caller's: its own
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    seen = [headers for _, headers in session.server.SEEN]
    for headers, rollout_id in zip(seen, ("maze-r0", "maze-r1", "maze-r2"), strict=True):
        span_context = dispatches[rollout_id].context
        [traceparent] = [value for name, value in headers if name == "traceparent"]
        assert traceparent.split("-")[1:3] == [f"{span_context.trace_id:032x}", _hex(span_context.span_id)]
        assert [value for name, value in headers if name == "baggage"] == [f"nemo.gym.rollout.id={rollout_id}"]
    assert ("x-user", "7") in seen[0] and [value for name, value in seen[1] if name == "x-tag"] == ["a", "b"]
    assert given == {"x-user": "7"} and list(multi.raw_items()) == [("x-tag", "a"), ("x-tag", "b")]  # copies


def test_a_handshake_that_carries_its_own_traceparent_keeps_it(served: Any, telemetry: Any) -> None:
    session = served(INJECT, verify=False)
    theirs = "00-5ce0e9a56015fec5aadfa328ae398115-ab54a98ceb1f0ad2-01"
    session.play({("maze", 0): [1]}, headers={"traceparent": theirs})
    [(_, headers)] = session.server.SEEN
    assert [(name, value) for name, value in headers if name in ("traceparent", "baggage")] == [("traceparent", theirs)]


def test_a_session_whose_handshake_carries_a_context_runs_in_it(served: Any, telemetry: Any) -> None:
    """The receive side alone, at the ASGI application uvicorn serves: a client that sets the headers itself."""
    session = served(RECEIVE)
    theirs = "00-5ce0e9a56015fec5aadfa328ae398115-ab54a98ceb1f0ad2-01"
    given = {"traceparent": theirs, "baggage": "nemo.gym.rollout.id=theirs-7"}
    session.play({("maze", 0): [1, 2]}, path="/inline", headers=given)
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert [f"{span.context.trace_id:032x}" for span in verifies] == ["5ce0e9a56015fec5aadfa328ae398115"] * 2
    assert [_hex(span.parent.span_id) for span in verifies if span.parent] == ["ab54a98ceb1f0ad2"] * 2
    assert [span.attributes[semconv.ROLLOUT_ID] for span in verifies] == ["theirs-7"] * 2


def test_an_application_at_a_receive_target_refuses_arguments_that_do_not_fit_when_called(
    make_module: Any, instrument: Any
) -> None:
    """An ASGI application at a receive target, as unwrapped: the TypeError comes from the call, not
    from the first await (uvicorn calls an application with no arguments to tell a factory from it,
    and serves nothing when it guesses wrong)."""
    name = make_module(SERVER_SOURCE)
    instrument(targets=[RECEIVE])
    app = importlib.import_module(name).make_app(None)
    with pytest.raises(TypeError):
        app()


# -- hand_off, on its own ------------------------------------------------------------------------


@pytest.fixture
def handing_off(instrument: Any) -> Any:
    instrument(targets=["concurrent.futures.thread:ThreadPoolExecutor.submit=hand_off"])


def _in_a_span(telemetry: Any, work: Any) -> Any:
    tracer = telemetry.tracer_provider.get_tracer("test")
    token = context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "3-1"))
    try:
        with tracer.start_as_current_span("episode") as span:
            return work(), span
    finally:
        context.detach(token)


def _seen_in_the_thread() -> tuple[int, Any]:
    current = context.get_current()
    return trace.get_current_span(current).get_span_context().span_id, baggage.get_baggage(semconv.BAGGAGE_ROLLOUT_ID, current)


def test_work_handed_to_an_executor_runs_in_the_callers_context_and_the_threads_own_after(
    handing_off: Any, telemetry: Any
) -> None:
    with ThreadPoolExecutor(max_workers=1) as executor:
        seen, span = _in_a_span(telemetry, lambda: executor.submit(_seen_in_the_thread).result())
        after = executor.submit(_seen_in_the_thread).result()  # the thread's own context again
    assert seen == (span.get_span_context().span_id, "3-1")
    assert after == (0, None)


@pytest.mark.parametrize(
    "target",
    [
        "concurrent.futures.thread:ThreadPoolExecutor.submit=hand_off",
        "asyncio.base_events:BaseEventLoop.run_in_executor=hand_off",
    ],
)
def test_run_in_executor_hands_its_work_on_in_the_callers_context(instrument: Any, telemetry: Any, target: str) -> None:
    instrument(targets=[target])

    async def in_the_loop() -> Any:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=1) as executor:
            return await loop.run_in_executor(executor, _seen_in_the_thread)

    tracer = telemetry.tracer_provider.get_tracer("test")

    async def episode() -> Any:
        context.attach(baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "3-1"))
        with tracer.start_as_current_span("episode") as span:
            return await in_the_loop(), span

    seen, span = asyncio.run(episode())
    assert seen == (span.get_span_context().span_id, "3-1")


def test_handed_off_work_returns_and_raises_what_it_did(handing_off: Any, telemetry: Any) -> None:
    result = object()
    failure = LookupError("gone")

    def fails() -> None:
        raise failure

    with ThreadPoolExecutor(max_workers=1) as executor:
        returned, _ = _in_a_span(telemetry, lambda: executor.submit(lambda: result).result())
        raised, _ = _in_a_span(telemetry, lambda: executor.submit(fails).exception())
        passed, _ = _in_a_span(telemetry, lambda: executor.submit(lambda *a, **k: (a, k), 1, key=2).result())
    assert returned is result and raised is failure
    assert passed == ((1,), {"key": 2})


def test_a_coroutine_function_is_still_refused_by_run_in_executor(instrument: Any, telemetry: Any) -> None:
    """asyncio's debug mode refuses a coroutine function before it submits anything: a hand-off at
    ``run_in_executor`` itself hands it on as given, so it is still refused."""
    instrument(targets=["asyncio.base_events:BaseEventLoop.run_in_executor=hand_off"])

    async def coroutine_function() -> None:
        pass

    async def hand_it_off() -> None:
        await asyncio.get_running_loop().run_in_executor(None, coroutine_function)

    with pytest.raises(TypeError, match="coroutines cannot be used with run_in_executor"):
        _in_a_span(telemetry, lambda: asyncio.run(hand_it_off(), debug=True))


def test_work_handed_off_from_an_empty_context_is_handed_on_as_given(handing_off: Any) -> None:
    """Nothing to carry: the executor gets the caller's own callable (what it runs is what was given)."""
    handed: list[Any] = []

    class Recording(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            handed.append(fn)
            return super().submit(fn, *args, **kwargs)

    def work() -> int:
        return 1

    with Recording(max_workers=1) as executor:
        assert executor.submit(work).result() == 1
    assert handed == [work] and handed[0] is work


# -- inject, wherever its headers argument sits ------------------------------------------------------

POSITIONAL_SOURCE = '''
def request(method, url, headers=None):
    """A client's request function whose headers are its third positional argument."""
    return headers
'''


def test_headers_passed_by_position_get_the_context_in_their_place(make_module: Any, instrument: Any, telemetry: Any) -> None:
    name = make_module(POSITIONAL_SOURCE)
    instrument(targets=[f"{name}:request=inject"])
    module = importlib.import_module(name)
    given = {"accept": "json"}
    (headers, span) = _in_a_span(telemetry, lambda: module.request("GET", "http://env/", given))
    (absent, _) = _in_a_span(telemetry, lambda: module.request("GET", "http://env/"))
    assert headers["accept"] == "json" and headers["baggage"] == "nemo.gym.rollout.id=3-1"
    assert headers["traceparent"].split("-")[2] == _hex(span.get_span_context().span_id)
    assert given == {"accept": "json"}
    assert set(absent) == {"traceparent", "baggage"}
