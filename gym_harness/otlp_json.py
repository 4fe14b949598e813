"""Read what the OTLP receiver printed: one OTLP/JSON object per line (spans and metrics).

`oteltap` prints each received span and metric as the protobuf JSON mapping of the OTLP
message (`traceId`/`spanId` in hex, attributes as `{"key", "value": {"stringValue": …}}`).
Lines that are not JSON (the receiver's own banner) are skipped, and so are, before parsing, metrics
other than the package's own: under the launcher every Ray and HTTP process exports its metrics
each second, which is most of the lines.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPAN_KIND_NAMES = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODE_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}
_METRIC_DATA_KEYS = ("sum", "gauge", "histogram", "exponentialHistogram", "summary")


def any_value(value: dict[str, Any]) -> Any:
    """Decode an OTLP AnyValue in its JSON mapping (int64 arrives as a string)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [any_value(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: any_value(kv.get("value", {})) for kv in value["kvlistValue"].get("values", [])}
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(key_values: list[dict[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value", {})) for kv in key_values or []}


def _enum(value: Any, names: dict[int, str]) -> str:
    # The JSON mapping may render an enum as its number or its name.
    if isinstance(value, int):
        return names.get(value, str(value))
    return str(value).removeprefix("SPAN_KIND_").removeprefix("STATUS_CODE_")


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    status: str
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Span:
        status = obj.get("status") or {}
        return cls(
            trace_id=obj.get("traceId", ""),
            span_id=obj.get("spanId", ""),
            parent_span_id=obj.get("parentSpanId", ""),
            name=obj.get("name", ""),
            kind=_enum(obj.get("kind", 0), SPAN_KIND_NAMES),
            status=_enum(status.get("code", 0), STATUS_CODE_NAMES),
            attributes=attributes(obj.get("attributes", [])),
            start_ns=int(obj.get("startTimeUnixNano") or 0),
            end_ns=int(obj.get("endTimeUnixNano") or 0),
            raw=obj,
        )


@dataclass(frozen=True)
class MetricPoint:
    name: str
    data_kind: str
    temporality: str
    value: float | None
    attributes: dict[str, Any]


def _metric_points(obj: dict[str, Any]) -> list[MetricPoint]:
    points = []
    for data_kind in _METRIC_DATA_KEYS:
        data = obj.get(data_kind)
        if not isinstance(data, dict):
            continue
        temporality = _enum(
            data.get("aggregationTemporality", 0),
            {0: "UNSPECIFIED", 1: "DELTA", 2: "CUMULATIVE"},
        ).removeprefix("AGGREGATION_TEMPORALITY_")
        for point in data.get("dataPoints", []):
            if "asInt" in point:
                value: float | None = int(point["asInt"])
            elif "asDouble" in point:
                value = float(point["asDouble"])
            else:
                value = None
            points.append(
                MetricPoint(obj.get("name", ""), data_kind, temporality, value, attributes(point.get("attributes", [])))
            )
    return points


@dataclass
class Received:
    spans: list[Span]
    metric_points: list[MetricPoint]


def span_objects(path: Path, start: int = 0, end: int | None = None) -> Iterator[dict[str, Any]]:
    """The spans the receiver printed between two byte offsets (``end`` None: to the end), parsed, in
    order; metric lines are skipped unparsed, and so is a line still being written."""
    with path.open("rb") as lines:
        lines.seek(start)
        position = start
        for line in lines:
            position += len(line)
            if end is not None and position > end:
                break
            if b'"spanId"' not in line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "spanId" in obj and "traceId" in obj:
                yield obj


def wait_quiet(path: Path, seconds: float, timeout: float = 30.0, interval: float = 0.1) -> None:
    """Until the receiver's output has not grown for ``seconds`` (what was sent is in), or ``timeout``."""
    deadline = time.monotonic() + timeout
    size, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = path.stat().st_size if path.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        time.sleep(interval)


def read_received(path: Path, metric_prefix: str = "gym.") -> Received:
    """Every span, and the metric points whose name starts with `metric_prefix`."""
    spans: list[Span] = []
    metric_points: list[MetricPoint] = []
    if not path.exists():
        return Received(spans, metric_points)
    with path.open(errors="replace") as lines:
        for line in lines:
            line = line.strip()
            if not line.startswith("{"):
                continue
            if '"spanId"' not in line and f'"name":"{metric_prefix}' not in line:
                continue  # a metric nobody asked for (Ray's, HTTP's): not worth parsing
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line still being written
            if "spanId" in obj and "traceId" in obj and "kind" in obj:
                spans.append(Span.from_json(obj))
            elif any(key in obj for key in _METRIC_DATA_KEYS):
                metric_points.extend(_metric_points(obj))
    return Received(spans, metric_points)
