"""``inject_frame`` and ``receive_frame``: a session's context in its first frame, for a client that sends no headers.

Opt-in at both ends, because it changes what the server's application reads: a server that is not
traced (or not configured so) sees a frame with one key more, and refuses it if its messages
refuse unknown fields (OpenEnv's do). Where the client's library lets the handshake carry headers,
``inject`` at its connect is the way; this is for a library that does not.

``inject_frame`` (a client's send function: its frame is its ``message``, ``frame`` or ``data``
argument, else its first; the session is the call's instance, else its first argument) puts the
current trace context and baggage, through the configured global propagators, into the first frame
of each session that is a JSON object text: under one reserved top-level key, :data:`CARRIER_KEY`,
written first, the rest of the frame's text as the caller gave it. A frame that is not a JSON
object (bytes, a list, anything else) is sent as given and the next one is looked at; a frame
that already has the key, a context with nothing to carry, or propagation off, send it as given
and the session carries nothing.

``receive_frame`` is ``receive`` (the handshake's headers, as ever) that also reads a WebSocket
session's frames (an ASGI application target, its ``receive`` argument): the first text frame
received with the key at the top level of a JSON object has it removed before the application
sees the frame (the client's text exactly, when the key was written first, as ``inject_frame``
writes it), and, when the handshake carried no ``traceparent`` (handshake headers win), the
context it carries becomes the session's from then on. Later frames pass as they came; so does
every frame that is not a JSON object. A carrier value that is not a small table of strings is
dropped (the key still removed) with one log line, never raised.
"""

from __future__ import annotations

import json
import logging
import re
import weakref
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context

from gym_instrument.compat import attach, current_context
from gym_instrument.record.failures import FAILURES
from gym_instrument.role.base import CallInFlight, Role, RoleCall
from gym_instrument.role.receive import ReceiveRole, handshake_scope

# "_otel": OpenTelemetry's, by name, and an underscore that JSON APIs read as "not the payload's";
# its value is the propagators' own carrier ({"traceparent": ..., "baggage": ...}), so any
# configured propagator (tracestate, B3) travels the same way.
CARRIER_KEY = "_otel"
_QUOTED_KEY = json.dumps(CARRIER_KEY)  # a frame without it is never parsed on the server
_CARRIER_ENTRIES = 16  # a carrier of more entries, or longer ones, is no propagators' carrier
_ENTRY_LENGTH = 8192  # W3C baggage's own bound on a header
_LEADING_KEY = re.compile(r"\s*\{\s*" + re.escape(_QUOTED_KEY) + r"\s*:\s*")
_AFTER_VALUE = re.compile(r"\s*,|(?=\s*\})")
_DECODER = json.JSONDecoder()
_LOG = logging.getLogger("gym_instrument")


def frame_carrying(frame: Any, current: Context) -> tuple[Any, bool]:
    """The frame to send with ``current``'s context under :data:`CARRIER_KEY`, and whether the
    frame was a JSON object text (the session's chance to carry it); ``frame`` itself when it
    carries nothing."""
    if type(frame) is not str:
        return frame, False
    body = frame.lstrip()
    if not body.startswith("{"):
        return frame, False
    try:
        document = json.loads(frame)
    except (ValueError, RecursionError):
        return frame, False
    if type(document) is not dict:
        return frame, False
    if CARRIER_KEY in document:
        return frame, True  # the caller's own: left as given
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=current)
    if not carrier:
        return frame, True
    head = f"{{{_QUOTED_KEY}:{json.dumps(carrier, separators=(',', ':'))}{',' if document else ''}"
    return frame[: len(frame) - len(body)] + head + body[1:], True


def frame_without_carrier(text: str) -> tuple[str, Any] | None:
    """``text`` without its top-level :data:`CARRIER_KEY`, and the key's value; None when it has none
    (not a JSON object, or the key is not at its top level)."""
    if _QUOTED_KEY not in text:
        return None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(document) is not dict or CARRIER_KEY not in document:
        return None
    value = document.pop(CARRIER_KEY)
    leading = _LEADING_KEY.match(text)
    if leading is not None:  # written first (inject_frame's way): the rest of the text as it was sent
        try:
            _, end = _DECODER.raw_decode(text, leading.end())
        except ValueError:
            end = -1
        after = _AFTER_VALUE.match(text, end) if end >= 0 else None
        if after is not None:
            opening = text.index("{") + 1
            stripped = text[:opening] + text[after.end() :]
            if _QUOTED_KEY not in stripped:  # (a second key of the name: the parsed form below)
                return stripped, value
    return json.dumps(document, ensure_ascii=False), value


def valid_carrier(value: Any) -> dict[str, str] | None:
    """``value`` when it is what propagators write (a small table of strings), else None."""
    if type(value) is not dict or not value or len(value) > _CARRIER_ENTRIES:
        return None
    for key, entry in value.items():
        if type(key) is not str or type(entry) is not str or len(key) > 64 or len(entry) > _ENTRY_LENGTH:
            return None
    return value


class InjectFrameRole(Role):
    """A client's send: the first JSON object frame of each session carries the current context."""

    name = "inject_frame"
    row_names = ("message", "frame", "data")
    decorated = False

    def __init__(self) -> None:
        self.sessions_carried: weakref.WeakSet[Any] = weakref.WeakSet()  # sessions whose first frame was looked at

    def prepare(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        if not flight.setup.hops.propagation:
            return None
        session = flight.instance
        if session is None and len(flight.args) > 1:
            session = flight.args[0]  # a send function called with its connection first
        try:
            if session is None or session in self.sessions_carried:
                return None
            frame, looked_at = frame_carrying(flight.row, flight.current)
            if looked_at:
                self.sessions_carried.add(session)
        except TypeError:
            return None  # a session that cannot be remembered: its frames go as given
        return flight.replace_row(frame)


class FirstFrameReceive:
    """An ASGI WebSocket session's ``receive``: the first frame that carries a context has it taken out."""

    __slots__ = ("__wrapped__", "adopts", "taken", "where")

    def __init__(self, receive: Any, adopts: bool, where: str) -> None:
        self.__wrapped__ = receive
        self.adopts = adopts  # the handshake carried no context: the frame's becomes the session's
        self.taken = False
        self.where = where

    async def __call__(self) -> Any:
        message = await self.__wrapped__()
        if self.taken:
            return message
        try:
            text = message.get("text") if type(message) is dict and message.get("type") == "websocket.receive" else None
            found = frame_without_carrier(text) if type(text) is str else None
            if found is None:
                return message
            self.taken = True
            stripped, value = found
            carrier = valid_carrier(value)
            if carrier is None:
                if FAILURES.first("a frame's context carrier", self.where):
                    _LOG.warning(
                        "gym_instrument: a WebSocket frame's %r is not a table of strings (%s); it is dropped",
                        CARRIER_KEY,
                        self.where,
                    )
            elif self.adopts:
                # The session's task runs in it from here on: its context is set back when the session ends.
                attach(propagate.extract(carrier, context=current_context()))
            return {**message, "text": stripped}
        except Exception:
            FAILURES.failed("reading a WebSocket frame's context at", self.where)
            return message


class ReceiveFrameRole(ReceiveRole):
    """``receive``, and a WebSocket session's first frame that carries a context (see the module)."""

    name = "receive_frame"
    row_names = ("receive",)
    row_by_name = True

    def prepare(self, call: RoleCall, flight: CallInFlight) -> Context | None:
        session_context = super().prepare(call, flight)
        if session_context is None or not flight.setup.hops.propagation:
            return session_context  # a boundary inside the session's first: its receive is read there
        try:
            scope = handshake_scope(flight)
            receive = flight.row
            if scope is None or scope.get("type") != "websocket" or not callable(receive):
                return session_context
            if type(receive) is FirstFrameReceive:
                return session_context
            carried = any(name == b"traceparent" for name, _ in scope.get("headers") or ())
            flight.replace_row(FirstFrameReceive(receive, not carried, call.where))
        except Exception:
            FAILURES.failed("reading a WebSocket session's frames at", call.where)
        return session_context
