"""Arize Phoenix as the demo's trace viewer: start it on 127.0.0.1, send it spans, read them back.

Phoenix (``arize-phoenix``, pinned in ``demo/requirements-ui.txt`` and installed by ``make demo-ui``
into ``.venv-ui/``) is one process with a SQLite file in its working folder. It takes OTLP/HTTP
protobuf at ``/v1/traces`` and files each span under the project its resource attribute
``openinference.project.name`` names; its REST API returns the spans it stored
(``GET /v1/projects/{project}/spans/otlpv1``), and its pages find a trace or a span by its
OpenTelemetry id (``/redirects/traces/{trace_id}``, ``/redirects/spans/{span_id}``).

A rollout's outcome is known only after its dispatch span ended (the health pass runs later), so
it reaches the viewer as span annotations posted afterwards (``POST /v1/span_annotations``) on
each rollout's root span: ``health`` (its verdict as the label, ``healthy`` or ``unhealthy``, the
failed checks as the explanation) and ``reward`` (the reward as the score; the label ``masked`` or
``none`` when the verify span has no reward). Phoenix's trace list shows a root span's annotations
in name order, as many as its column fits (``health`` first: at the default width the second is
behind a "+1"), and its span filter finds them: ``annotations['health'].label == 'unhealthy'``.

Only the standard library is used here, so both the demo's venv and a test can drive it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = "gym-demo"
# The outcome annotations on each rollout's dispatch span: their names (the verdict's sorts first,
# so the trace list shows it when its column fits one only), who wrote them (re-posting replaces
# them: Phoenix keys an annotation on its span, name and identifier), and the filter the trace
# list takes to show the unhealthy rollouts only.
VERDICT = "health"
REWARD = "reward"
# Which rollout a row is: its task (the task id, else #<task index>, as the report names it) and
# rollout id, as the label of a third annotation; it sorts after the other two, so the verdict stays
# the chip a narrow column shows, and Phoenix's Columns menu makes it a column of its own.
ROLLOUT = "rollout"
ANNOTATION_IDENTIFIER = "gym-instrument-demo"
UNHEALTHY_FILTER = f"annotations['{VERDICT}'].label == 'unhealthy'"
DEFAULT_PORT = 6006  # Phoenix's own default, and the report's ``--trace-url phoenix`` preset
START_TIMEOUT = 240.0  # seconds; a cold start runs the database migrations (about 10 s here, more on a busy machine)
INGEST_TIMEOUT = 120.0

# The server's own extras that a local trace viewer does not need: no usage telemetry, no fonts or
# scripts fetched from elsewhere, no assistant that can run shell commands or browse.
QUIET = {
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_AGENTS_DISABLE_BASH": "true",
    "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
    "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
}


class ViewerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Phoenix:
    """A Phoenix server on 127.0.0.1:``port`` (started here or found running)."""

    port: int = DEFAULT_PORT
    project: str = PROJECT

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        return f"{self.base_url}/v1/traces"

    # -- URLs a person opens ---------------------------------------------------------------------

    def project_url(self) -> str:
        """The run's page: the project's traces (by its id, which the API tells)."""
        return f"{self.base_url}/projects/{self.project_id()}"

    def trace_url(self, trace_id: str) -> str:
        return f"{self.base_url}/redirects/traces/{trace_id}"

    def span_url(self, span_id: str) -> str:
        return f"{self.base_url}/redirects/spans/{span_id}"

    @property
    def trace_url_template(self) -> str:
        """For ``gym-instrument report --trace-url``."""
        return self.base_url + "/redirects/traces/{trace_id}"

    # -- what a process needs to send its spans here ------------------------------------------------

    def exporting(self, also_file: bool = True) -> dict[str, str]:
        """``OTEL_*`` variables that send a process's spans here over OTLP/HTTP (and to ``gym_json_file``'s file)."""
        return {
            "OTEL_TRACES_EXPORTER": "gym_json_file,otlp" if also_file else "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={self.project}",
        }

    # -- the REST API ---------------------------------------------------------------------------------

    def get(self, path: str, **query: Any) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())

    def post(self, path: str, body: Any, **query: Any) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def healthy(self) -> bool:
        """Whether Phoenix answers here (its health check and its project list)."""
        try:
            with urllib.request.urlopen(self.base_url + "/healthz", timeout=5) as response:
                if response.status != 200:
                    return False
            return isinstance(self.get("/v1/projects").get("data"), list)
        except (OSError, ValueError, AttributeError):
            return False

    def project_id(self) -> str:
        for project in self.get("/v1/projects")["data"]:
            if project["name"] == self.project:
                return str(project["id"])
        raise ViewerError(f"Phoenix at {self.base_url} has no project {self.project!r}")

    def spans(self, **filters: Any) -> list[dict[str, Any]]:
        """The project's spans as Phoenix stored them, attributes decoded; ``trace_id=``, ``name=`` filter."""
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            query = {"limit": 1000, **filters, **({"cursor": cursor} if cursor else {})}
            try:
                page = self.get(f"/v1/projects/{urllib.parse.quote(self.project)}/spans/otlpv1", **query)
            except urllib.error.HTTPError as error:
                if error.code == 404:  # no span has arrived yet, so no project either
                    return []
                raise
            found.extend(stored_span(span) for span in page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def wait_for_spans(
        self, expected: dict[str, int], trace_ids: set[str] | None = None, timeout: float = INGEST_TIMEOUT
    ) -> list[dict[str, Any]]:
        """Poll until the project holds ``expected`` spans of each name (of ``trace_ids`` only, when given):
        Phoenix stores what it receives in the background. Every span of the project, as stored."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            counts = {
                name: sum(span["name"] == name and (trace_ids is None or span["trace_id"] in trace_ids) for span in spans)
                for name in expected
            }
            if all(counts[name] >= number for name, number in expected.items()):
                return spans
            if time.monotonic() > deadline:
                raise ViewerError(f"after {timeout:.0f} s Phoenix holds {counts} of {expected}")
            time.sleep(0.5)

    def annotate(self, annotations: list[dict[str, Any]]) -> int:
        """Post span annotations (``POST /v1/span_annotations``, stored before it answers); how many it stored."""
        stored = 0
        for start in range(0, len(annotations), 100):
            batch = annotations[start : start + 100]
            stored += len(self.post("/v1/span_annotations", {"data": batch}, sync="true")["data"])
        return stored

    def span_annotations(self, span_ids: list[str]) -> list[dict[str, Any]]:
        """The annotations Phoenix holds on these spans (``GET /v1/projects/{project}/span_annotations``)."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(span_ids), 50):
            cursor = None
            while True:
                query = {"span_ids": span_ids[start : start + 50], "limit": 1000, **({"cursor": cursor} if cursor else {})}
                page = self.get(f"/v1/projects/{urllib.parse.quote(self.project)}/span_annotations", **query)
                found.extend(page["data"])
                cursor = page.get("next_cursor")
                if not cursor:
                    break
        return found

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """One query to the GraphQL API Phoenix's own pages use (``POST /graphql``); its ``data``."""
        answer = self.post("/graphql", {"query": query, "variables": variables})
        if answer.get("errors"):
            raise ViewerError(f"Phoenix's GraphQL API answered: {answer['errors']}")
        return answer["data"]  # type: ignore[no-any-return]

    def filtered_spans(self, condition: str) -> list[dict[str, str]]:
        """The spans the trace list's filter box shows for ``condition`` (a Phoenix span filter expression):
        ``{"name", "span_id", "trace_id"}`` each, read through the same GraphQL field the page reads."""
        query = """query ($id: ID!, $condition: String!, $after: String) {
            node(id: $id) { ... on Project {
                spans(first: 100, after: $after, filterCondition: $condition) {
                    edges { node { name context { spanId traceId } } }
                    pageInfo { hasNextPage endCursor }
                } } } }"""
        found: list[dict[str, str]] = []
        after = None
        while True:
            spans = self.graphql(query, id=self.project_id(), condition=condition, after=after)["node"]["spans"]
            for edge in spans["edges"]:
                context = edge["node"]["context"]
                found.append({"name": edge["node"]["name"], "span_id": context["spanId"], "trace_id": context["traceId"]})
            if not spans["pageInfo"]["hasNextPage"]:
                return found
            after = spans["pageInfo"]["endCursor"]


def rollout_label(dispatch: dict[str, Any]) -> str:
    """A rollout as a row of the trace list names it: ``arith-001 · 0-2``, ``#3 · 3-1`` for a task without an id."""
    task = dispatch.get("nemo.gym.task.id")
    if task is None:
        index = dispatch.get("nemo.gym.task.index")
        task = f"#{index}" if index is not None else "(no task)"
    return f"{task} · {dispatch.get('nemo.gym.rollout.id', '?')}"


def outcome_annotations(rollouts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rollout (as :func:`rollouts` gives them), the annotations its dispatch span gets: ``rollout``
    (its task and rollout id), ``health`` (the verdict) from its health span and ``reward`` from its
    verify span, where it has them.

    A dispatch that failed has only ``rollout``: Phoenix shows its error status already.
    """
    annotations = []
    for rollout in rollouts:
        span_id = rollout["dispatch"]["span_id"]
        common = {"span_id": span_id, "annotator_kind": "CODE", "identifier": ANNOTATION_IDENTIFIER}
        annotations.append({**common, "name": ROLLOUT, "result": {"label": rollout_label(rollout["dispatch"]["attributes"])}})
        if rollout["health"] is not None:
            health = rollout["health"]["attributes"]
            checks = health.get("nemo.gym.health.checks") or []
            annotations.append(
                {
                    **common,
                    "name": VERDICT,
                    "result": {
                        "label": health.get("nemo.gym.health.verdict"),
                        "explanation": "failed checks: " + ", ".join(checks) if checks else None,
                    },
                    "metadata": {"health_span_id": rollout["health"]["span_id"]},
                }
            )
        if rollout["verify"] is not None:
            verify = rollout["verify"]["attributes"]
            reward = verify.get("nemo.gym.rollout.reward")
            if reward is not None:
                result: dict[str, Any] = {"score": float(reward)}
            elif verify.get("nemo.gym.verify.masked"):
                result = {"label": "masked", "explanation": "the verifier masked this rollout out of the scores"}
            else:
                result = {"label": "none", "explanation": f"no numeric reward: {verify.get('nemo.gym.failure_kind', 'unknown')}"}
            annotations.append(
                {**common, "name": REWARD, "result": result, "metadata": {"verify_span_id": rollout["verify"]["span_id"]}}
            )
    return annotations


def any_value(value: dict[str, Any] | None) -> Any:
    """Phoenix's OTLP ``AnyValue`` (snake_case keys, the unused ones null) as a Python value."""
    if not value:
        return None
    for key, item in value.items():
        if item is None:
            continue
        if key == "array_value":
            return [any_value(element) for element in item.get("values") or []]
        if key == "kvlist_value":
            return {pair["key"]: any_value(pair.get("value")) for pair in item.get("values") or []}
        if key == "int_value":
            return int(item)
        if key == "double_value":
            return float(item)
        return item
    return None


def stored_span(span: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": span["name"],
        "trace_id": span["trace_id"],
        "span_id": span["span_id"],
        "parent_span_id": span.get("parent_span_id") or None,
        "status_code": (span.get("status") or {}).get("code", 0),
        "attributes": {pair["key"]: any_value(pair.get("value")) for pair in span.get("attributes") or []},
    }


class PhoenixServer(Phoenix):
    """Start ``phoenix serve`` with its data in ``work``; stop it with :meth:`stop`."""

    def __init__(self, phoenix: Path, work: Path, port: int = DEFAULT_PORT, grpc_port: int | None = None) -> None:
        super().__init__(port=port)
        self.executable, self.work = phoenix, work
        self.grpc_port = grpc_port or free_port()  # Phoenix always opens a gRPC receiver too: not on the shared 4317
        self.process: subprocess.Popen[bytes] | None = None
        self.log = work / "phoenix.log"

    def start(self, timeout: float = START_TIMEOUT) -> PhoenixServer:
        if not self.executable.is_file():
            raise ViewerError(f"no Phoenix at {self.executable} (make demo-ui installs it into .venv-ui/)")
        if port_open(self.port):
            raise ViewerError(f"127.0.0.1:{self.port} is taken by another program")
        self.work.mkdir(parents=True, exist_ok=True)
        environment = {
            **{key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PHOENIX_"))},
            **QUIET,
            "PHOENIX_WORKING_DIR": str(self.work),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
        }
        with open(self.log, "wb") as log:
            # Its own session, so that stopping it reaches whatever it started, and a Ctrl-C in the
            # terminal reaches it only through stop().
            self.process = subprocess.Popen(
                [str(self.executable), "serve"], env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        (self.work / "phoenix.pid").write_text(f"{self.process.pid}\n")
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise ViewerError(f"Phoenix exited with {self.process.returncode}; its log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ViewerError(f"Phoenix did not answer within {timeout:.0f} s; its log:\n{self.log_tail()}")
            time.sleep(0.5)
        return self

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=timeout)
        (self.work / "phoenix.pid").unlink(missing_ok=True)


def detached_pid(work: Path) -> int | None:
    """The pid of the Phoenix a detached ``make demo-ui`` left running with its data in ``work``, if it still runs."""
    pid_file = work / "phoenix.pid"
    try:
        pid = int(pid_file.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if not any(part.endswith(b"phoenix") for part in command) or b"serve" not in command:
        return None  # gone, and the pid may be another program's by now
    return pid


def stop_detached(work: Path, timeout: float = 30.0) -> int | None:
    """Stop the server a detached ``make demo-ui`` left running with its data in ``work``; its pid, or None."""
    pid = detached_pid(work)
    (work / "phoenix.pid").unlink(missing_ok=True)
    if pid is None:
        return None
    os.killpg(pid, signal.SIGTERM)  # it leads its own process group
    deadline = time.monotonic() + timeout
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    return pid


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def rollouts(spans: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Per dispatch span: the dispatch, its verify and its health span (None where it has none)."""
    below: dict[tuple[str, str], dict[str, Any]] = {}
    for span in spans:
        if span["parent_span_id"] and span["name"] in ("gym.verify", "gym.rollout.health"):
            below[(span["parent_span_id"], span["name"])] = span
    for span in spans:
        if span["name"] == "gym.rollout.dispatch":
            yield {
                "dispatch": span,
                "verify": below.get((span["span_id"], "gym.verify")),
                "health": below.get((span["span_id"], "gym.rollout.health")),
            }
