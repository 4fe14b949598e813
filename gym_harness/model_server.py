"""A scripted OpenAI-compatible model server for the end-to-end test.

No model runs here: answers are fixed. For a multiple-choice task the server answers right
on the first, third, ... request for a prompt and wrong on the second, fourth, ..., so two
repeats of one task get different rewards. When tools are offered and no tool output is in
the input yet, it calls the first tool. Every second reply to a prompt (the second, fourth, ...
request carrying that prompt, whatever it answers) reports 0 output tokens in its usage: a
real defect that NeMo Gym 0.7.0's health checks find (`model_call_zero_completion_tokens`)
when model-call capture is on, so its verdicts are both `healthy` and `unhealthy`. It serves
the OpenAI Responses API (`/v1/responses`, what NeMo Gym's `openai_model` server calls) and Chat
Completions (`/v1/chat/completions`, what `vllm_model` calls), on 127.0.0.1 only.

Standard library only, so it runs under any Python 3.9+.

Usage:
    python model_server.py --answers tasks.jsonl --port-file port.txt --request-log requests.jsonl

`--answers` is an e2e input JSONL (repeatable): rows with `expected_answer` and `options` make
the answer key, keyed by the text of the row's last user message; a materialized task row keeps
them under `task_input` (`responses_create_params`, and `task_data`), and a verifiers task row
(`e2e/verifiers/`) has its user text as `prompt`. A row with `"fail_first": true` has the first
request for its prompt answered with HTTP 400 (a model call that fails), the later ones as usual.
A streaming Chat Completions request (`stream: true`, what verifiers sends) gets the same reply as
server-sent chunks. Every request is logged as one JSON line (path, prompt key, answer kind, and
the W3C `traceparent`/`baggage` headers it carried).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_NAME = "scripted-model"
INPUT_TOKENS = 20
OUTPUT_TOKENS = 10


def _message_text(content: Any) -> str:
    """The text of a Responses/Chat message's content (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for item in reversed(messages):
        if isinstance(item, dict) and item.get("role") == "user":
            return _message_text(item.get("content"))
    return ""


def load_answer_key(path: Path) -> dict[str, dict[str, Any]]:
    """Map a prompt's user text to its expected letter and option letters."""
    answer_key: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        task_input = row.get("task_input")
        if isinstance(task_input, dict):  # a materialized task row
            row = {**task_input.get("task_data", {}), "responses_create_params": task_input["responses_create_params"]}
        if "expected_answer" not in row:
            continue
        if "prompt" in row:
            user_text = row["prompt"]
        else:
            user_text = last_user_text(row["responses_create_params"]["input"])
        letters = [letter for option in row.get("options") or [] for letter in option]
        answer_key[user_text] = {
            "expected": row["expected_answer"],
            "letters": letters,
            "fail_first": bool(row.get("fail_first")),
        }
    return answer_key


class Script:
    """Decides each reply. Thread-safe: the HTTP server handles requests on threads."""

    def __init__(self, answer_key: dict[str, dict[str, Any]], request_log: Path | None) -> None:
        self.answer_key = answer_key
        self.request_log = request_log
        self._seen: dict[str, int] = {}
        self._failed: set[str] = set()
        self._lock = threading.Lock()

    def _next_count(self, prompt: str) -> int:
        with self._lock:
            count = self._seen.get(prompt, 0)
            self._seen[prompt] = count + 1
            return count

    def log(self, record: dict[str, Any]) -> None:
        if self.request_log is None:
            return
        with self._lock, self.request_log.open("a") as log_file:
            log_file.write(json.dumps(record, sort_keys=True) + "\n")

    def fails(self, messages: list[dict[str, Any]]) -> bool:
        """Whether this request is the first for a prompt whose row asks for a failed model call."""
        prompt = last_user_text(messages)
        answer = self.answer_key.get(prompt)
        if answer is None or not answer["fail_first"]:
            return False
        with self._lock:
            if prompt in self._failed:
                return False
            self._failed.add(prompt)
            return True

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], has_tool_output: bool) -> dict[str, Any]:
        """One scripted turn: {"kind", "output_tokens", and "name", "arguments" or "text"}."""
        prompt = last_user_text(messages)
        first_of_two = self._next_count(prompt) % 2 == 0
        turn = self._turn(prompt, tools, has_tool_output, first_of_two)
        turn["output_tokens"] = OUTPUT_TOKENS if first_of_two else 0
        return turn

    def _turn(self, prompt: str, tools: list[dict[str, Any]], has_tool_output: bool, first_of_two: bool) -> dict[str, Any]:
        if tools and not has_tool_output:
            tool = tools[0]
            name = tool.get("name") or (tool.get("function") or {}).get("name") or "tool"
            return {"kind": "tool_call", "name": name, "arguments": json.dumps({"city": "San Francisco"})}
        if has_tool_output:
            return {"kind": "final", "text": "It is cold in San Francisco; take a jacket."}
        answer = self.answer_key.get(prompt)
        if answer is None:
            return {"kind": "final", "text": "I do not know."}
        if first_of_two:
            return {"kind": "right", "text": f"Thinking it over, the answer is \\boxed{{{answer['expected']}}}"}
        wrong = next((letter for letter in answer["letters"] if letter != answer["expected"]), "Z")
        return {"kind": "wrong", "text": f"Thinking it over, the answer is \\boxed{{{wrong}}}"}


def responses_body(request: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    if turn["kind"] == "tool_call":
        output = [
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex}",
                "call_id": f"call_{uuid.uuid4().hex[:12]}",
                "name": turn["name"],
                "arguments": turn["arguments"],
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn["text"], "annotations": []}],
            }
        ]
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": float(int(time.time())),
        "model": MODEL_NAME,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": request.get("tools") or [],
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": turn["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": INPUT_TOKENS + turn["output_tokens"],
        },
    }


def chat_completion_body(turn: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish_reason = "stop"
    if turn["kind"] == "tool_call":
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": turn["name"], "arguments": turn["arguments"]},
            }
        ]
        finish_reason = "tool_calls"
    else:
        message["content"] = turn["text"]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": turn["output_tokens"],
            "total_tokens": INPUT_TOKENS + turn["output_tokens"],
        },
    }


def chat_completion_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Chat Completions body as the chunks a streaming reply sends (``stream: true``)."""
    choice = body["choices"][0]
    delta = {key: value for key, value in choice["message"].items() if value is not None}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(delta["tool_calls"])]
    head = {key: body[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    return [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
        {**head, "choices": [], "usage": body["usage"]},
    ]


def make_handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send_json(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _send_stream(self, chunks: list[dict[str, Any]]) -> None:
            payload = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("", "/v1/models", "/models"):
                self._send_json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as error:
                self._send_json(400, {"error": {"message": f"bad JSON: {error}"}})
                return
            path = self.path.split("?", 1)[0].rstrip("/")
            if path.endswith("/responses"):
                items = request.get("input") or []
                if isinstance(items, str):
                    items = [{"role": "user", "content": items}]
                has_tool_output = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
                turn = script.reply(items, request.get("tools") or [], has_tool_output)
                body = responses_body(request, turn)
            elif path.endswith("/chat/completions"):
                messages = request.get("messages") or []
                if script.fails(messages):
                    script.log({"path": path, "kind": "failed", "output_tokens": 0, "traceparent": None, "baggage": None})
                    self._send_json(400, {"error": {"message": "scripted failure", "type": "invalid_request_error"}})
                    return
                has_tool_output = any(isinstance(m, dict) and m.get("role") == "tool" for m in messages)
                turn = script.reply(messages, request.get("tools") or [], has_tool_output)
                body = chat_completion_body(turn)
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            script.log(
                {
                    "path": path,
                    "kind": turn["kind"],
                    "output_tokens": turn["output_tokens"],
                    "traceparent": self.headers.get("traceparent"),
                    "traceparents": len(self.headers.get_all("traceparent") or ()),
                    "baggage": self.headers.get("baggage"),
                }
            )
            if request.get("stream") and path.endswith("/chat/completions"):
                self._send_stream(chat_completion_chunks(body))
            else:
                self._send_json(200, body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--answers", type=Path, action="append", required=True, help="e2e input JSONL (the answer key); repeatable"
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    parser.add_argument("--request-log", type=Path, help="append one JSON line per model request here")
    args = parser.parse_args()

    answer_key = {prompt: answer for path in args.answers for prompt, answer in load_answer_key(path).items()}
    script = Script(answer_key, args.request_log)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(script))
    server.daemon_threads = True
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.replace(args.port_file)
    print(f"scripted model server listening on http://127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
