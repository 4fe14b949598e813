"""``gym-instrument replay RUN_DIR``: the spans a past NeMo Gym run would have had, from its files.

A run that was never traced still left its facts on disk: ``<stem>.jsonl`` (one row per
rollout: the verify response plus the collector's ``_ng_*`` keys), ``<stem>_failures.jsonl``
(failed attempts, with ``_ng_failure_class``), ``<stem>_materialized_inputs.jsonl`` (the rows
that were dispatched, with the dataset's task ids; NeMo Gym 0.7.0 leaves them out of the
output rows) and ``rollout_verdicts.jsonl`` (the health pass). Replay turns them into the spans
the live instrumentation makes, through the same code: the roles' attribute rules read through
the run's framework's schema (NeMo Gym's, ``frameworks/nemo_gym/schema.py``), the record layer's
ending of failed spans, and the health role's :func:`~gym_instrument.role.health.verdict_spans`
with :class:`~gym_instrument.link.memory.DispatchLinks` to find each verdict's dispatch, so
``gym-instrument report`` reads a replayed run like a live one:

- per row, ``gym.rollout.dispatch`` (a root span: its own trace), with the rollout's token totals
  when its row has them (``response.usage``), and ``gym.verify`` below it when the row has a
  ``reward`` key; a failure row's dispatch has status ERROR and
  ``error.type`` = its ``_ng_failure_class`` (``cancelled`` for a drained row);
- per verdict whose rollout was replayed, ``gym.rollout.health`` under that dispatch.

Every replayed span carries ``gym.replayed=true`` (and so does the resource) and
``gym.replay.timing``: ``measured`` when the row says how long the rollout took
(``ng_perf.total_latency_ms``, written by NeMo Gym 0.7.0 with observability on), else
``placeholder``: a zero-length span. Start times are the row's ``response.created_at`` (when
the model answered, a little after the rollout started), else the file's modification time.
Verify and health spans have no timing in the files: they are zero-length placeholders at the
end of the dispatch and at the verdicts file's modification time.

Spans go to ``--output FILE`` as OTLP/JSON lines (OpenTelemetry's file exporter), else to the
exporter ``OTEL_TRACES_EXPORTER`` names (default ``otlp``, protocol from
``OTEL_EXPORTER_OTLP_PROTOCOL``), configured by the usual ``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import SpanKind

from gym_instrument import semconv
from gym_instrument.frameworks import FRAMEWORKS
from gym_instrument.lines import bounded_lines, too_long
from gym_instrument.link.memory import DispatchLinks
from gym_instrument.record.metrics import SCHEMA_URL
from gym_instrument.record.spans import end_failed
from gym_instrument.role import ROLES
from gym_instrument.role.health import verdict_spans
from gym_instrument.schema.base import RolloutSchema
from gym_instrument.schema.rules import identity_attributes
from gym_instrument.version import __version__

_LOG = logging.getLogger("gym_instrument.tools.replay")

REPLAYED = "gym.replayed"
REPLAY_TIMING = "gym.replay.timing"
TIMING_MEASURED = "measured"
TIMING_PLACEHOLDER = "placeholder"

EXPORT_BATCH = 512
VERDICT_BATCH = 4096
DEFAULT_FRAMEWORK = "nemo_gym"


class _ReplayCall:
    """What the roles' hooks know of a replayed call (``role.RoleCall``): the run's framework's
    schema, the roles' own rules on, no framework span to adopt."""

    def __init__(self, schema: RolloutSchema) -> None:
        self.schema = schema
        self.defaults = True
        self.adopts = False
        self.where = "gym-instrument replay"
        self.framework: str | None = None


_DISPATCH, _VERIFY = ROLES[semconv.ROLE_DISPATCH], ROLES[semconv.ROLE_VERIFY]


@dataclass
class RunFiles:
    """The files of one run: rollouts and the sidecars beside them."""

    rollouts: Path
    failures: Path | None = None
    materialized: Path | None = None
    verdicts: Path | None = None


@dataclass
class ReplayCounts:
    """What a replay made, and what it skipped."""

    dispatches: int = 0
    failed_dispatches: int = 0
    verifies: int = 0
    health: int = 0
    measured: int = 0
    placeholders: int = 0
    unreadable_lines: int = 0
    verdicts_without_rollout: int = 0
    files: list[str] = field(default_factory=list)


def _is_rollout_row(path: Path, files: Any) -> bool:
    """True when the first readable line of ``path`` is a rollout row (collector keys or a reward)."""
    try:
        with open(path, "rb") as stream:
            for _, line in zip(range(20), bounded_lines(stream), strict=False):
                try:
                    row = json.loads(line.data or b"")
                except (ValueError, RecursionError):
                    continue
                return type(row) is dict and any(key in row for key in files.row_keys) and "resourceSpans" not in row
    except OSError:
        return False
    return False


def find_runs(run_dir: str | os.PathLike[str], framework: str = DEFAULT_FRAMEWORK) -> list[RunFiles]:
    """The runs in ``run_dir`` (a directory, or one rollouts file), each with its sidecars, laid out
    as ``framework`` lays out a run's files."""
    files = _run_files(framework)
    path = Path(run_dir)
    if path.is_file():
        candidates = [path]
        folder = path.parent
    elif path.is_dir():
        folder = path
        candidates = sorted(
            child
            for child in path.glob("*.jsonl")
            if child.name != files.verdicts
            and not child.stem.endswith((files.failures_suffix, files.materialized_suffix))
            and _is_rollout_row(child, files)
        )
    else:
        raise FileNotFoundError(f"no such file or directory: {path}")
    if not candidates:
        raise FileNotFoundError(f"no rollouts file in {path} (a .jsonl file of NeMo Gym output rows)")
    verdicts = folder / files.verdicts
    runs = []
    for rollouts in candidates:
        failures = rollouts.with_name(rollouts.stem + files.failures_suffix + ".jsonl")
        materialized = rollouts.with_name(rollouts.stem + files.materialized_suffix + ".jsonl")
        runs.append(
            RunFiles(
                rollouts,
                failures if failures.is_file() else None,
                materialized if materialized.is_file() else None,
                verdicts if verdicts.is_file() else None,
            )
        )
    return runs


def _rows(path: Path, counts: ReplayCounts) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as stream:
        for line in bounded_lines(stream):
            if line.data is None:
                counts.unreadable_lines += 1
                _LOG.warning("gym-instrument replay: %s", too_long(path, line))
                continue
            if not line.data.strip():
                continue
            try:
                row = json.loads(line.data)
            except (ValueError, RecursionError):
                counts.unreadable_lines += 1  # a truncated or hand-edited line: the health pass flags it too
                continue
            if type(row) is dict:
                yield row
            else:
                counts.unreadable_lines += 1


def _run_files(framework: str) -> Any:
    """How ``framework`` lays out a finished run's files; ValueError when it is unknown or has no such layout."""
    known = FRAMEWORKS.get(framework)
    if known is None or known.run_files is None:
        replayable = ", ".join(name for name, entry in FRAMEWORKS.items() if entry.run_files is not None)
        raise ValueError(f"cannot replay runs of {framework!r}; replayable: {replayable}")
    return known.run_files


def _task_ids(materialized: Path | None, counts: ReplayCounts, schema: RolloutSchema) -> dict[int, str]:
    """Task index -> task id from the dispatched rows (one entry per task: its repeats share it)."""
    task_ids: dict[int, str] = {}
    if materialized is None:
        return task_ids
    for row in _rows(materialized, counts):
        identity = schema.identity(row)
        if identity.task_id is not None and identity.task_index is not None:
            task_ids.setdefault(identity.task_index, identity.task_id)
    return task_ids


def _number_at(row: dict[str, Any], path: tuple[str, str]) -> float | None:
    outer = row.get(path[0])
    return _finite(outer.get(path[1]) if type(outer) is dict else None)


def _finite(value: Any) -> float | None:
    """A JSON number (int or float, not bool) that is finite, else None."""
    return float(value) if type(value) in (int, float) and math.isfinite(value) else None


class _SyncBatchProcessor(SpanProcessor):
    """Exports ended spans in batches on the caller's thread: a replay is faster than any exporter,
    and a background queue (BatchSpanProcessor) would drop spans when it fills."""

    def __init__(self, exporter: SpanExporter, batch: int = EXPORT_BATCH) -> None:
        self.exporter = exporter
        self.batch = batch
        self.spans: list[ReadableSpan] = []
        self.failed_batches = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)
        if len(self.spans) >= self.batch:
            self.force_flush()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self.spans:
            spans, self.spans = self.spans, []
            if self.exporter.export(spans).name != "SUCCESS":
                self.failed_batches += 1
        return True

    def shutdown(self) -> None:
        self.force_flush()
        self.exporter.shutdown()


def exporter_from_environment() -> SpanExporter:
    """The span exporter ``OTEL_TRACES_EXPORTER`` names (first of a list; default ``otlp``), as the SDK resolves it."""
    name = (os.environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")[0].strip()
    if name == "none":
        raise ValueError("OTEL_TRACES_EXPORTER=none: nowhere to send the spans (give --output FILE)")
    if name == "otlp":
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
        ).strip()
        by_protocol = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
        if protocol not in by_protocol:
            raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported (grpc or http/protobuf)")
        name = by_protocol[protocol]
    found = [point for point in entry_points(group="opentelemetry_traces_exporter") if point.name == name]
    if not found:
        raise ValueError(f"no trace exporter named {name!r} is installed (OTEL_TRACES_EXPORTER)")
    return found[0].load()()  # type: ignore[no-any-return]


def file_exporter(output: str | os.PathLike[str], append: bool = False) -> SpanExporter:
    """OpenTelemetry's own OTLP/JSON file exporter writing to ``output``."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter

    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not append:
        target.write_text("")  # the exporter appends: a replay starts its file afresh
    return FileSpanExporter(target)


class Replayer:
    """Makes the spans of one or more runs through one tracer provider."""

    def __init__(
        self, exporter: SpanExporter, source: str = "", link_capacity: int = 1_000_000, framework: str = DEFAULT_FRAMEWORK
    ) -> None:
        self.files = _run_files(framework)
        self.call = _ReplayCall(FRAMEWORKS[framework].schema)
        service = os.environ.get("OTEL_SERVICE_NAME") or "gym-replay"
        resource = Resource.create({"service.name": service, REPLAYED: True, "gym.replay.source": source})
        self.processor = _SyncBatchProcessor(exporter)
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer(semconv.INSTRUMENTATION_NAME, __version__, schema_url=SCHEMA_URL)
        self.link_capacity = link_capacity
        self.counts = ReplayCounts()

    def replay(self, run: RunFiles) -> None:
        counts = self.counts
        counts.files += [str(path) for path in (run.rollouts, run.failures, run.materialized, run.verdicts) if path]
        task_ids = _task_ids(run.materialized, counts, self.call.schema)
        # As live: dispatches are remembered for their verdicts only when there is a health pass.
        links = DispatchLinks(self.link_capacity) if run.verdicts is not None else None
        for path, failed in ((run.rollouts, False), (run.failures, True)):
            if path is None:
                continue
            fallback_ns = path.stat().st_mtime_ns
            for row in _rows(path, counts):
                self._rollout(row, failed, task_ids, links, fallback_ns)
        if run.verdicts is not None and links is not None:
            self._verdicts(run.verdicts, links)

    def _rollout(
        self, row: dict[str, Any], failed: bool, task_ids: dict[int, str], links: DispatchLinks | None, fallback_ns: int
    ) -> None:
        counts, files, call = self.counts, self.files, self.call
        attributes, identity = _DISPATCH.start_attributes(call, row, Context())
        if identity is None:
            return
        adjusted = False
        if identity.task_id is None and identity.task_index is not None:
            # The task id from the materialized inputs, which keep what the output row may not.
            identity.task_id, adjusted = task_ids.get(identity.task_index), True
        if identity.attempt is None and files.native_task_id in row:
            # A native episode (0.7.0) is dispatched with episode_id.attempt, which live puts on the span;
            # its output row keeps the task (_ng_task_id) but not the attempt: the first one is assumed.
            identity.attempt, adjusted = 0, True
        if adjusted:
            attributes = identity_attributes(identity)
        latency = _number_at(row, files.latency_ms)
        latency_ns = int(latency * 1_000_000) if latency is not None and latency >= 0 else None
        started = _number_at(row, files.started_at)
        start = int(started * 1_000_000_000) if started is not None and started > 0 else fallback_ns
        end = start + (latency_ns or 0)
        timing = TIMING_MEASURED if latency_ns is not None else TIMING_PLACEHOLDER
        counts.measured += latency_ns is not None
        counts.placeholders += latency_ns is None
        if not failed:
            # As live: the rollout's token totals (and model calls) from its result, which is the row.
            attributes.update(_DISPATCH.on_success(call, row, row))
        attributes.update({REPLAYED: True, REPLAY_TIMING: timing})
        dispatch = self.tracer.start_span(semconv.SPAN_DISPATCH, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start)
        counts.dispatches += 1
        if "reward" in row:
            # As live: the verify runs in the dispatch's context, its rollout id in baggage.
            current = trace.set_span_in_context(dispatch, Context())
            if identity.rollout_id is not None:
                current = baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, identity.rollout_id, current)
            verify_attributes, _ = _VERIFY.start_attributes(call, row, current)
            verify_attributes.update(_VERIFY.on_success(call, row, row))
            verify_attributes.update({REPLAYED: True, REPLAY_TIMING: TIMING_PLACEHOLDER})
            self.tracer.start_span(
                semconv.SPAN_VERIFY, context=current, kind=SpanKind.INTERNAL, attributes=verify_attributes, start_time=end
            ).end(end_time=end)
            counts.verifies += 1
        drained = row.get(files.dispatch_drained)
        if failed or drained:
            failure = row.get(files.failure_class) if failed else None
            end_failed(dispatch, semconv.ERROR_TYPE_CANCELLED if drained else str(failure or "failed"), end)
            counts.failed_dispatches += 1
            return  # as live: a failed dispatch is not remembered for a verdict
        dispatch.end(end_time=end)
        if links is not None:
            links.remember(dispatch.get_span_context(), identity)

    def _verdicts(self, path: Path, links: DispatchLinks) -> None:
        when = path.stat().st_mtime_ns
        batch: list[dict[str, Any]] = []
        for verdict in _rows(path, self.counts):
            batch.append(verdict)
            if len(batch) >= VERDICT_BATCH:
                self._verdict_batch(batch, links, when)
                batch = []
        if batch:
            self._verdict_batch(batch, links, when)

    def _verdict_batch(self, verdicts: Sequence[dict[str, Any]], links: DispatchLinks, when: int) -> None:
        spanned: list[Any] = []
        verdict_spans(self.tracer, links, self.call.schema, verdicts, spanned, each=_mark_replayed, start_time=when)
        self.counts.health += len(spanned)
        self.counts.verdicts_without_rollout += len(verdicts) - len(spanned)  # no orphan span, as live

    def close(self) -> None:
        self.provider.shutdown()


def _mark_replayed(verdict: Any, attributes: dict[str, Any]) -> None:
    attributes[REPLAYED] = True
    attributes[REPLAY_TIMING] = TIMING_PLACEHOLDER


def replay(
    run_dir: str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    append: bool = False,
    exporter: SpanExporter | None = None,
    framework: str = DEFAULT_FRAMEWORK,
) -> ReplayCounts:
    """Replay the run(s) in ``run_dir`` to ``output`` (OTLP/JSON lines), ``exporter``, or the configured
    exporter; ``framework`` names whose run layout and schema the files are read with."""
    runs = find_runs(run_dir, framework)
    if exporter is None:
        exporter = file_exporter(output, append) if output is not None else exporter_from_environment()
    replayer = Replayer(exporter, source=str(run_dir), framework=framework)
    try:
        for run in runs:
            replayer.replay(run)
    finally:
        replayer.close()
    if replayer.processor.failed_batches:
        _LOG.warning("gym_instrument replay: the exporter failed %d batch(es)", replayer.processor.failed_batches)
    return replayer.counts
