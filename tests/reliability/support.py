"""What the reliability tests observe: real SDK providers, the bytes a real OTLP exporter would
send, every log record at every level, and instrumentation that always comes off again."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from gym_instrument import GymInstrumentor
from tests.conftest import Telemetry

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def fuzz_examples(default: int = 500) -> int:
    """Examples per property: ``GYM_FUZZ_EXAMPLES`` (``make fuzz`` sets 20000), else the CI default."""
    return int(os.environ.get("GYM_FUZZ_EXAMPLES", "") or default)


# The same collected telemetry as the shared fixtures, usable outside a fixture.
Sink = Telemetry


@contextlib.contextmanager
def instrumented(sink: Sink | None, targets: Sequence[Any], **kwargs: Any) -> Iterator[GymInstrumentor]:
    """``instrument()`` with the sink's providers and no presets; always ``uninstrument()`` after."""
    if sink is not None:
        kwargs.setdefault("tracer_provider", sink.tracer_provider)
        kwargs.setdefault("meter_provider", sink.meter_provider)
    kwargs.setdefault("presets", "none")
    instrumentor = GymInstrumentor()
    assert not instrumentor.is_instrumented_by_opentelemetry, "a previous test left the package instrumented"
    instrumentor.instrument(targets=list(targets), **kwargs)
    try:
        yield instrumentor
    finally:
        instrumentor.uninstrument()


# -- what an OTLP exporter can send ------------------------------------------------------------


def _valid_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if kind is int:
        return INT64_MIN <= value <= INT64_MAX
    return kind in (bool, float)


def valid_attribute_value(value: Any) -> bool:
    """An OpenTelemetry attribute value (scalar, or a sequence of one scalar type) OTLP can encode."""
    if _valid_scalar(value):
        return True
    if type(value) in (tuple, list):
        return all(_valid_scalar(item) for item in value) and len({type(item) for item in value}) <= 1
    return False


def assert_exportable(spans: Sequence[ReadableSpan]) -> bytes:
    """Every attribute of every span is valid, and the real OTLP encoder sends all of them.

    Returns the serialized request, the bytes an OTLP/HTTP exporter would post.
    """
    expected_attributes = 0
    for span in spans:
        for key, value in (span.attributes or {}).items():
            assert _valid_scalar(key), f"attribute key {key!r} cannot be encoded"
            assert valid_attribute_value(value), f"{span.name}: attribute {key!r}={value!r} cannot be encoded"
            expected_attributes += 1
        for event in span.events:
            for key, value in (event.attributes or {}).items():
                assert valid_attribute_value(value), f"{span.name}: event attribute {key!r}={value!r} cannot be encoded"
        if span.status.description is not None:
            assert _valid_scalar(span.status.description), f"{span.name}: status {span.status.description!r} cannot be encoded"
    payload = encode_spans(list(spans)).SerializeToString()
    decoded = ExportTraceServiceRequest.FromString(payload)
    sent = [span for resource in decoded.resource_spans for scope in resource.scope_spans for span in scope.spans]
    assert len(sent) == len(spans)
    assert sum(len(span.attributes) for span in sent) == expected_attributes, "the encoder dropped attributes"
    return payload


def metrics_payload(data: Any) -> bytes:
    """The bytes an OTLP metric exporter would post for this collection."""
    return encode_metrics(data).SerializeToString() if data is not None else b""


# -- every log line at every level -------------------------------------------------------------


class LogCapture(logging.Handler):
    """Every record any logger emits, formatted with its traceback as a log file would show it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))

    def text(self) -> str:
        return "\n".join(self.lines)


@contextlib.contextmanager
def all_logs() -> Iterator[LogCapture]:
    """Capture every logger at DEBUG (the package's own included), restoring levels afterwards."""
    capture = LogCapture()
    root = logging.getLogger()
    loggers = [root, *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    levels = [(logger, logger.level) for logger in loggers if isinstance(logger, logging.Logger)]
    root.addHandler(capture)
    for logger, _level in levels:
        logger.setLevel(logging.DEBUG)
    try:
        yield capture
    finally:
        root.removeHandler(capture)
        for logger, level in levels:
            logger.setLevel(level)
