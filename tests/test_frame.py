"""A session's context in its first frame (``inject_frame`` at a client's send, ``receive_frame`` at
the server's ASGI application), for a client library whose handshake takes no headers.

The rules on their own first (what a frame becomes, and what the application then reads), then a
real Starlette application under uvicorn on 127.0.0.1 with a real websockets client that passes no
headers: in this process (a frame's own text, hostile carriers), and across two processes under
``opentelemetry-instrument`` with one configuration file (the verify in its dispatch's trace).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from gym_instrument import semconv
from gym_instrument.record.failures import FAILURES
from gym_instrument.role.frame import CARRIER_KEY, frame_carrying, frame_without_carrier

pytest.importorskip("websockets")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

ROOT = Path(__file__).resolve().parents[1]
TRACE_ID, SPAN_ID = 0x5CE0E9A56015FEC5AADFA328AE398115, 0xAB54A98CEB1F0AD2


def _episode_context() -> Any:
    parent = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)))
    return baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, "maze-r0", trace.set_span_in_context(parent))


# -- the rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize("frame", ['{"type":"step","move":1}', ' {\n  "move": 2}', "{}", "{ }", '{"a": {"_otel": 1}}'])
def test_the_server_reads_exactly_the_text_the_client_gave_and_the_clients_context(frame: str) -> None:
    sent, looked_at = frame_carrying(frame, _episode_context())
    assert looked_at and sent != frame
    assert next(iter(json.loads(sent))) == CARRIER_KEY  # the carrier first, the caller's keys after it
    found = frame_without_carrier(sent)
    assert found is not None
    text, carrier = found
    assert text == frame  # byte for byte
    assert carrier == {
        "traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01",
        "baggage": f"{semconv.BAGGAGE_ROLLOUT_ID}=maze-r0",
    }


@pytest.mark.parametrize("frame", ["[1, 2]", '"text"', "not json", "{broken", b'{"move": 1}', 7, "  12"])
def test_a_frame_that_is_not_a_json_object_text_is_sent_and_received_as_given(frame: Any) -> None:
    sent, looked_at = frame_carrying(frame, _episode_context())
    assert sent is frame and not looked_at
    if isinstance(frame, str):
        assert frame_without_carrier(frame) is None


def test_a_frame_with_the_key_of_its_own_or_nothing_to_carry_is_sent_as_given() -> None:
    theirs = '{"_otel": {"traceparent": "theirs"}, "move": 1}'
    assert frame_carrying(theirs, _episode_context()) == (theirs, True)
    plain = '{"move": 1}'
    assert frame_carrying(plain, trace.set_span_in_context(trace.INVALID_SPAN)) == (plain, True)


def test_a_key_below_the_top_level_is_the_applications() -> None:
    assert frame_without_carrier('{"move": {"_otel": {"traceparent": "x"}}}') is None
    assert frame_without_carrier('[{"_otel": {}}]') is None


def test_a_key_written_elsewhere_or_twice_is_removed_all_the_same() -> None:
    text, carrier = frame_without_carrier('{"move": 1, "_otel": {"traceparent": "x"}}') or ("", None)
    assert json.loads(text) == {"move": 1} and carrier == {"traceparent": "x"}
    text, carrier = frame_without_carrier('{"_otel": 1, "_otel": {"traceparent": "y"}, "move": 2}') or ("", None)
    assert json.loads(text) == {"move": 2} and CARRIER_KEY not in text and carrier == {"traceparent": "y"}


# -- in this process: a real server, a real client that passes no headers --------------------------

SERVER_SOURCE = '''
import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute


class Board:
    """One session's environment: a move's reward is a tenth of it."""

    def step(self, move):
        return {"reward": move / 10}


async def session(websocket):
    """Each text frame a move, stepped in the session's executor thread; the answer says what the
    application read of the frame, byte for byte."""
    await websocket.accept()
    board, executor = Board(), ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    try:
        while True:
            text = await websocket.receive_text()
            message = json.loads(text)
            if message.get("type") == "close":
                break
            observation = await loop.run_in_executor(executor, board.step, message.get("move", 0))
            await websocket.send_text(json.dumps({**observation, "read": text}))
    finally:
        executor.shutdown(wait=False)
        await websocket.close()


app = Starlette(routes=[WebSocketRoute("/ws", session)])


def fastapi_app():
    """The same session served by FastAPI (its __call__ reaches Starlette's: two boundaries, one session)."""
    from fastapi import FastAPI, WebSocket

    async def route(websocket: WebSocket):
        await session(websocket)

    try:
        api = FastAPI(telemetry={"tracing": False, "metrics": False, "logs": False})
    except TypeError:  # a FastAPI without telemetry of its own
        api = FastAPI()
    api.add_api_websocket_route("/ws", route)
    return api
'''

CLIENT_SOURCE = '''
import asyncio
import json
import sys

from websockets.asyncio.client import connect


async def run_episode(task, repeat, url, frames):
    """A user's episode: one session (a handshake with no headers of the caller's), the frames as
    given; what the server's application read of each."""
    read = []
    async with connect(url) as session:
        for frame in frames:
            await session.send(frame)
            read.append(json.loads(await session.recv())["read"])
        await session.send(json.dumps({"type": "close"}))
    return read


def main(url, episodes):
    async def all_at_once():
        return await asyncio.gather(*(run_episode({"task_id": task}, repeat, url, frames) for task, repeat, frames in episodes))

    return asyncio.run(all_at_once())


def cli():
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))))
'''

DISPATCH_START = {
    "nemo.gym.task.id": "row.task_id",
    "nemo.gym.rollout.repeat": "arg.repeat",
    "nemo.gym.rollout.id": {"template": "{task_id}-r{repeat}"},
}
INJECT_FRAME = {"path": "websockets.asyncio.connection:Connection.send", "role": "inject_frame"}
RECEIVE_FRAME = {"path": "starlette.applications:Starlette.__call__", "role": "receive_frame"}
RECEIVE = {"path": "starlette.applications:Starlette.__call__", "role": "receive"}
HAND_OFF = {"path": "concurrent.futures.thread:ThreadPoolExecutor.submit", "role": "hand_off"}
MOVES = [json.dumps({"type": "step", "move": move}) for move in (1, 2, 3)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def served(make_module: Any, instrument: Any) -> Iterator[Any]:
    """``served(*targets)``: the client's dispatch, the server's verify and ``targets`` instrumented,
    the server started; ``play(episodes)`` runs them (task, repeat, frames) and says what the server read."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(*targets: dict[str, Any], fastapi: bool = False) -> Any:
        server_name, client_name = make_module(SERVER_SOURCE), make_module(CLIENT_SOURCE)
        instrument(
            config={
                "targets": [
                    {"path": f"{client_name}:run_episode", "role": "dispatch", "row": "task", "start": DISPATCH_START},
                    {"path": f"{server_name}:Board.step", "role": "verify", "row": "move"},
                    *targets,
                ]
            }
        )
        port = _free_port()
        module = importlib.import_module(server_name)
        app = module.fastapi_app() if fastapi else module.app
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        started.append((server, thread))
        for _ in range(600):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        client = importlib.import_module(client_name)
        return lambda episodes: client.main(f"ws://127.0.0.1:{port}/ws", episodes)

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.mark.parametrize("fastapi", [False, True], ids=["starlette", "fastapi"])
def test_a_client_that_sends_no_headers_carries_its_context_in_its_first_frame(
    served: Any, telemetry: Any, fastapi: bool
) -> None:
    play = served(INJECT_FRAME, RECEIVE_FRAME, HAND_OFF, fastapi=fastapi)
    read = play([("maze", 0, MOVES), ("maze", 1, MOVES)])
    assert read == [MOVES, MOVES]  # the application read each frame exactly as the client gave it
    dispatches = {span.attributes[semconv.ROLLOUT_ID]: span for span in telemetry.spans(semconv.SPAN_DISPATCH)}
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 6
    for rollout_id in ("maze-r0", "maze-r1"):
        dispatch = dispatches[rollout_id]
        mine = [span for span in verifies if span.parent is not None and span.parent.span_id == dispatch.context.span_id]
        assert [span.context.trace_id for span in mine] == [dispatch.context.trace_id] * 3
        assert [span.attributes[semconv.ROLLOUT_ID] for span in mine] == [rollout_id] * 3
        assert sorted(span.attributes[semconv.ROLLOUT_REWARD] for span in mine) == [0.1, 0.2, 0.3]
    assert {span.name for span in telemetry.spans()} == {semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY}


def test_without_the_client_option_every_frame_is_sent_as_given(served: Any, telemetry: Any) -> None:
    play = served(RECEIVE_FRAME, HAND_OFF)
    assert play([("maze", 0, MOVES)]) == [MOVES]
    verifies = telemetry.spans(semconv.SPAN_VERIFY)
    assert len(verifies) == 3 and all(span.parent is None for span in verifies)


def test_a_server_that_did_not_opt_in_reads_the_key(served: Any, telemetry: Any) -> None:
    """Why both ends opt in: a server without ``receive_frame`` reads the frame the client sent."""
    play = served(INJECT_FRAME, RECEIVE, HAND_OFF)
    [read] = play([("maze", 0, MOVES)])
    assert list(json.loads(read[0])) == [CARRIER_KEY, "type", "move"]
    assert read[1:] == MOVES[1:]  # the first frame only


def test_the_handshakes_context_wins_and_the_frames_key_is_still_removed(served: Any, telemetry: Any) -> None:
    """A handshake that carries a traceparent (``inject`` at connect) names the session's context; the
    frame's carrier, the same client's, is taken out unread."""
    inject = {"path": "websockets.asyncio.client:connect.__init__", "role": "inject", "row": "additional_headers"}
    hostile = json.dumps({CARRIER_KEY: {"traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"}, "move": 1})
    play = served(inject, RECEIVE_FRAME, HAND_OFF)
    [read] = play([("maze", 0, [hostile])])
    assert [json.loads(text) for text in read] == [{"move": 1}]
    [dispatch] = telemetry.spans(semconv.SPAN_DISPATCH)
    [verify] = telemetry.spans(semconv.SPAN_VERIFY)
    assert verify.parent is not None and verify.parent.span_id == dispatch.context.span_id


@pytest.mark.parametrize(
    "carrier",
    [7, "00-x", [], {}, {"traceparent": 7}, {"traceparent": "x" * 10_000}, {f"k{i}": "v" for i in range(40)}],
    ids=["number", "string", "list", "empty", "not-a-string", "too-long", "too-many"],
)
def test_a_hostile_carrier_is_dropped_with_one_log_line_and_the_frame_still_read(
    served: Any, telemetry: Any, caplog: pytest.LogCaptureFixture, carrier: Any
) -> None:
    FAILURES.forget()  # (logged once a process: each case starts as a process would)
    play = served(RECEIVE_FRAME, HAND_OFF)
    frames = [json.dumps({CARRIER_KEY: carrier, "move": move}) for move in (1, 2)]
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        reads = play([("maze", 0, frames), ("maze", 1, frames)])
    for read in reads:
        assert json.loads(read[0]) == {"move": 1} and read[1] == frames[1]  # the first frame's key only
    assert [span.parent for span in telemetry.spans(semconv.SPAN_VERIFY)] == [None] * 4
    assert [r.getMessage() for r in caplog.records if CARRIER_KEY in r.getMessage()] == [
        f"gym_instrument: a WebSocket frame's {CARRIER_KEY!r} is not a table of strings "
        f"(target {RECEIVE_FRAME['path']}); it is dropped"
    ]


# -- across two processes, one configuration file -----------------------------------------------------

CONFIG = """
[[targets]]
path = "frame_client:run_episode"
role = "dispatch"
row = "task"
start.task_id = "row.task_id"
start.repeat = "arg.repeat"
start.rollout_id = { template = "{task_id}-r{repeat}" }

[[targets]]
path = "starlette.applications:Starlette.__call__"
role = "receive_frame"

[[targets]]
path = "concurrent.futures.thread:ThreadPoolExecutor.submit"
role = "hand_off"

[[targets]]
path = "frame_server:Board.step"
role = "verify"
row = "move"
"""
CLIENT_OPTION = """
[[targets]]
path = "websockets.asyncio.connection:Connection.send"
role = "inject_frame"
"""


@pytest.mark.parametrize("option", [True, False], ids=["inject_frame", "off"])
def test_across_processes_the_servers_verify_lands_in_the_clients_dispatch_trace(tmp_path: Path, option: bool) -> None:
    from tests.otlp_receiver import OtlpReceiver

    (tmp_path / "frame_server.py").write_text(SERVER_SOURCE)
    (tmp_path / "frame_client.py").write_text(CLIENT_SOURCE)
    (tmp_path / "gym.toml").write_text(CONFIG + (CLIENT_OPTION if option else ""))
    launcher = str(Path(sys.executable).parent / "opentelemetry-instrument")
    port = _free_port()
    episodes = [["maze", 0, MOVES], ["maze", 1, MOVES]]
    client_command = [launcher, sys.executable, "-c", "import frame_client; frame_client.cli()", f"ws://127.0.0.1:{port}/ws"]
    client_command.append(json.dumps(episodes))
    with OtlpReceiver() as receiver:
        env = {
            **{key: value for key, value in os.environ.items() if not key.startswith("OTEL_")},
            "PYTHONPATH": os.pathsep.join((str(tmp_path), str(ROOT))),
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_PYTHON_GYM_PRESETS": "none",
            "OTEL_PYTHON_GYM_CONFIG": str(tmp_path / "gym.toml"),
        }
        log = tmp_path / "server.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [launcher, sys.executable, "-m", "uvicorn", "frame_server:app", "--host", "127.0.0.1", "--port", str(port)],
                env={**env, "OTEL_SERVICE_NAME": "frame-server"},
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                start_new_session=True,
            )
        try:
            from tests.test_crossprocess import wait_until_listening

            wait_until_listening(port, server, log)
            client = subprocess.run(
                client_command,
                env={**env, "OTEL_SERVICE_NAME": "frame-client"},
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            assert client.returncode == 0, client.stderr
            spans = receiver.wait_for(
                lambda spans: (
                    sum(s["name"] == semconv.SPAN_VERIFY for s in spans) >= 6
                    and sum(s["name"] == semconv.SPAN_DISPATCH for s in spans) >= 2
                ),
                timeout=60,
                what="2 dispatch and 6 verify spans",
            )
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    # The server's application read every frame byte for byte as the client gave it, option or not.
    assert json.loads(client.stdout.strip().splitlines()[-1]) == [MOVES, MOVES]
    dispatches = {s["attributes"][semconv.ROLLOUT_ID]: s for s in spans if s["name"] == semconv.SPAN_DISPATCH}
    verifies = [s for s in spans if s["name"] == semconv.SPAN_VERIFY]
    assert {s["service"] for s in verifies} == {"frame-server"}
    if not option:
        assert [(s["parent_id"], s["attributes"].get(semconv.ROLLOUT_ID)) for s in verifies] == [(None, None)] * 6
        return
    for rollout_id in ("maze-r0", "maze-r1"):
        dispatch = dispatches[rollout_id]
        mine = [s for s in verifies if s["parent_id"] == dispatch["span_id"]]
        assert [s["trace_id"] for s in mine] == [dispatch["trace_id"]] * 3
        assert [s["attributes"][semconv.ROLLOUT_ID] for s in mine] == [rollout_id] * 3
        assert sorted(s["attributes"][semconv.ROLLOUT_REWARD] for s in mine) == [0.1, 0.2, 0.3]


def test_the_docs_configuration_names_both_ends() -> None:
    from gym_instrument.config.declare import parse_config

    page = (ROOT / "docs" / "your-own-framework.md").read_text()
    section = page.split("- **A client library that allows no headers**", 1)[1]
    targets = parse_config(section.split("```toml\n", 1)[1].split("```", 1)[0])
    assert [(target.path, target.role) for target in targets] == [
        (INJECT_FRAME["path"], "inject_frame"),
        (RECEIVE_FRAME["path"], "receive_frame"),
    ]
