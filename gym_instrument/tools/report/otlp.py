"""Read the spans of a run from OTLP/JSON lines, one export batch per line, streaming.

Both writers a run is likely to have used write this shape: OpenTelemetry's own file exporter
(``opentelemetry-exporter-otlp-json-file``, ``OTEL_TRACES_EXPORTER=otlp_json_file``) and the
Collector's ``file`` exporter. Each line is an ``ExportTraceServiceRequest`` in the protobuf JSON
mapping: ``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [...]}]}]}``.
Ids are hex (the OTLP/JSON rule) or base64 (a generic protobuf JSON writer); int64 values may
be strings; enums may be numbers or names. Lines that are not JSON, and lines of other signals
(``resourceMetrics``, ``resourceLogs``), are counted and skipped.

Only the package's own spans are decoded; every other span is counted by its name and left
alone, so a file full of HTTP spans costs little more than reading it.

Lines are read through the package's bounded reader (``gym_instrument.lines``): a line longer than
``LINE_LIMIT`` is skipped, and a last line cut off mid-batch (a writer killed while it wrote) is
reported as truncated; each is one line on standard error naming the file, the line and its size,
and the batches before it still count.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gym_instrument import semconv
from gym_instrument.lines import bounded_lines, too_long

GYM_SPANS = frozenset((semconv.SPAN_DISPATCH, semconv.SPAN_VERIFY, semconv.SPAN_HEALTH))
STATUS_ERROR = 2
SCOPE = semconv.INSTRUMENTATION_NAME  # the package's tracer: its model-call spans are read beside the three spans above
_CLIENT = (3, "SPAN_KIND_CLIENT")
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2, "UNSET": 0, "OK": 1, "ERROR": 2}
# A progress bar is worth drawing only for reads that take a while (about a second and up).
PROGRESS_BYTES = 64 * 1024 * 1024


class Span(NamedTuple):
    """One of the package's spans, as the report needs it."""

    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    status_code: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any]
    resource: dict[str, Any]  # shared by the spans of one resource in one line


@dataclass
class ReadStats:
    """What the reader met besides the package's spans."""

    files: int = 0
    lines: int = 0
    bytes: int = 0
    bad_lines: int = 0  # not JSON, or JSON of another shape
    other_signal_lines: int = 0  # metrics or logs
    other_spans: int = 0
    unreadable_spans: int = 0  # a span of ours with no readable trace id or span id
    spans: int = 0
    files_read: list[str] = field(default_factory=list)
    truncated: list[tuple[str, int, int]] = field(default_factory=list)  # (file, line, bytes): a last line cut off
    notes: list[str] = field(default_factory=list)  # what was skipped, one line each (also on standard error)

    def note(self, message: str) -> None:
        self.notes.append(message)
        print(f"gym-instrument: {message}", file=sys.stderr)


def span_files(paths: Sequence[str | os.PathLike[str]], skipped: list[Path] | None = None) -> list[Path]:
    """The files to read: each path itself, or every OTLP/JSON file under a directory (sorted).

    Under a directory, a ``.json``/``.jsonl``/``.ndjson`` file whose first line is not an OTLP batch
    (a run's ``rollouts.jsonl`` beside its replayed spans, say) is left out and added to ``skipped``.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if not child.is_file() or child.suffix not in (".jsonl", ".json", ".ndjson") or child.name.startswith("."):
                    continue
                if looks_like_otlp(child):
                    files.append(child)
                elif skipped is not None:
                    skipped.append(child)
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or directory: {path}")
    return files


_OTLP_START = re.compile(rb'\s*\{\s*"(resource|instrumentation_?[lL]ibrary)')


def looks_like_otlp(path: Path) -> bool:
    """Whether the file starts as an OTLP/JSON batch does (an empty file does not)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(256)
    except OSError:
        return False
    return _OTLP_START.match(head) is not None


def hex_id(value: Any, size: int) -> str | None:
    """An id as lowercase hex of ``size`` bytes, from hex or base64; None when it is neither."""
    if type(value) is not str or not value:
        return None
    if len(value) == size * 2:
        try:
            bytes.fromhex(value)
        except ValueError:
            pass
        else:
            return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == size else None


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` in its JSON mapping, as a Python value."""
    if type(value) is not dict:
        return None
    for key, item in value.items():
        if key == "stringValue":
            return item
        if key == "intValue":
            try:
                return int(item)
            except (TypeError, ValueError):
                return None
        if key == "doubleValue":
            try:
                return float(item)  # "NaN", "Infinity" arrive as strings
            except (TypeError, ValueError):
                return None
        if key == "boolValue":
            return item is True or item == "true"
        if key == "arrayValue":
            values = item.get("values") if type(item) is dict else None
            return [any_value(element) for element in values] if type(values) is list else []
        if key == "kvlistValue":
            values = item.get("values") if type(item) is dict else None
            return attributes(values) if type(values) is list else {}
        if key == "bytesValue":
            return item
    return None


def attributes(key_values: Any) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    if type(key_values) is not list:
        return decoded
    for key_value in key_values:
        if type(key_value) is dict and type(key_value.get("key")) is str:
            decoded[key_value["key"]] = any_value(key_value.get("value"))
    return decoded


def _nanos(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _status_code(status: Any) -> int:
    if type(status) is not dict:
        return 0
    code = status.get("code", 0)
    if type(code) is int:
        return code
    return _STATUS_NAMES.get(str(code), 0)


def _get(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


def _scope_name(scope: dict[str, Any]) -> Any:
    inner = scope.get("scope")
    if type(inner) is not dict:
        inner = _get(scope, "instrumentationLibrary", "instrumentation_library")
    return inner.get("name") if type(inner) is dict else None


def is_model_call(span: dict[str, Any]) -> bool:
    """A model-call span of the package: kind CLIENT, with ``gen_ai.operation.name`` (GenAI semantic conventions)."""
    if span.get("kind") not in _CLIENT:
        return False
    key_values = span.get("attributes")
    return type(key_values) is list and any(type(kv) is dict and kv.get("key") == "gen_ai.operation.name" for kv in key_values)


def spans_of_line(line: str | bytes, stats: ReadStats) -> Iterator[Span]:
    """The package's spans in one OTLP/JSON line."""
    try:
        batch = json.loads(line)
    except ValueError:
        stats.bad_lines += 1
        return
    if type(batch) is not dict:
        stats.bad_lines += 1
        return
    resource_spans = _get(batch, "resourceSpans", "resource_spans")
    if type(resource_spans) is not list:
        if any(key in batch for key in ("resourceMetrics", "resourceLogs", "resource_metrics", "resource_logs")):
            stats.other_signal_lines += 1
        else:
            stats.bad_lines += 1
        return
    for resource_span in resource_spans:
        if type(resource_span) is not dict:
            continue
        resource_value = resource_span.get("resource")
        resource = attributes(resource_value.get("attributes")) if type(resource_value) is dict else {}
        scopes = _get(resource_span, "scopeSpans", "scope_spans")
        if scopes is None:
            scopes = _get(resource_span, "instrumentationLibrarySpans", "instrumentation_library_spans")  # before OTLP 1.0
        if type(scopes) is not list:
            continue
        for scope in scopes:
            spans = scope.get("spans") if type(scope) is dict else None
            if type(spans) is not list:
                continue
            ours = _scope_name(scope) == SCOPE
            for span in spans:
                if type(span) is not dict:
                    continue
                name = span.get("name")
                if type(name) is not str or (name not in GYM_SPANS and not (ours and is_model_call(span))):
                    stats.other_spans += 1
                    continue
                trace_id = hex_id(_get(span, "traceId", "trace_id"), 16)
                span_id = hex_id(_get(span, "spanId", "span_id"), 8)
                if trace_id is None or span_id is None:
                    stats.unreadable_spans += 1
                    continue
                stats.spans += 1
                yield Span(
                    name,
                    trace_id,
                    span_id,
                    hex_id(_get(span, "parentSpanId", "parent_span_id"), 8),
                    _nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano")),
                    _nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano")),
                    _status_code(span.get("status")),
                    attributes(span.get("attributes")),
                    resource,
                )


def _last_line(path: Path, number: int, data: bytes, stats: ReadStats) -> Iterator[Span]:
    """A file's last line, which has no newline: a whole batch, or one cut off (truncated), or junk."""
    bad = stats.bad_lines
    yield from spans_of_line(data, stats)
    if stats.bad_lines > bad and _OTLP_START.match(data) is not None:
        stats.truncated.append((str(path), number, len(data)))
        stats.note(
            f"{path}: line {number} is cut off after {len(data):,} bytes (truncated: a writer stopped mid-batch); "
            f"its spans are lost, the {number - 1:,} lines before it count"
        )


class _Progress:
    """A tqdm bar over the bytes read, drawn on a terminal for long reads only."""

    warned = False

    def __init__(self, total: int, enabled: bool | None) -> None:
        self.bar: Any = None
        if enabled is None:
            enabled = total >= PROGRESS_BYTES and sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # the base install: no bar, and the read goes on
                if not _Progress.warned:
                    _Progress.warned = True
                    print("no progress bar: tqdm is not installed (pip install 'gym-instrument[report]')", file=sys.stderr)
                return
            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="reading spans", file=sys.stderr)

    def update(self, amount: int) -> None:
        if self.bar is not None:
            self.bar.update(amount)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def read_spans(paths: Iterable[Path], stats: ReadStats, progress: bool | None = None) -> Iterator[Span]:
    """Every span of the package in ``paths``, file after file, line after line (one line in memory)."""
    files = list(paths)
    bar = _Progress(sum(path.stat().st_size for path in files), progress)
    try:
        for path in files:
            stats.files += 1
            stats.files_read.append(str(path))
            with open(path, "rb") as stream:
                for line in bounded_lines(stream):
                    stats.lines += 1
                    stats.bytes += line.size
                    bar.update(line.size)
                    data = line.data
                    if data is None:
                        stats.bad_lines += 1
                        stats.note(too_long(path, line))
                    elif data.endswith(b"\n"):
                        if data.strip():
                            yield from spans_of_line(data, stats)
                    elif data.strip():
                        yield from _last_line(path, line.number, data, stats)
    finally:
        bar.close()
