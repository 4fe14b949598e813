"""A job's trace reaches its rollouts: TRACEPARENT / TRACESTATE / BAGGAGE in the collector's environment."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from opentelemetry import trace

from gym_instrument import semconv

JOB_TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
JOB_SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{JOB_TRACE_ID:032x}-{JOB_SPAN_ID:016x}-01"

ROWS = [{"task_id": f"t{index}", "_ng_task_index": index, "_ng_rollout_index": 0} for index in range(3)]


@pytest.fixture
def loop(make_module: Any, instrument: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    def build(environ: dict[str, str], **options: Any) -> Any:
        for name in ("TRACEPARENT", "TRACESTATE", "BAGGAGE", "OTEL_PYTHON_GYM_JOB_CONTEXT"):
            monkeypatch.delenv(name, raising=False)
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        name = make_module()
        instrument(targets=[f"{name}:send_row=dispatch", f"{name}:score=verify"], **options)
        return importlib.import_module(name)

    return build


def links_of(span: Any) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


@pytest.mark.parametrize("extractors", [{}, {"dispatch": [lambda call: {"test.extra": 1}]}], ids=["defaults", "extractors"])
def test_root_dispatches_link_to_the_job_and_keep_their_own_traces(loop: Any, telemetry: Any, extractors: Any) -> None:
    module = loop({"TRACEPARENT": TRACEPARENT, "TRACESTATE": "vendor=1"}, extractors=extractors)
    for row in ROWS:
        module.send_row(dict(row))
    spans = telemetry.spans(semconv.SPAN_DISPATCH)
    assert len(spans) == 3
    assert all(links_of(span) == [(JOB_TRACE_ID, JOB_SPAN_ID)] for span in spans)
    assert all(span.parent is None for span in spans)
    assert len({span.context.trace_id for span in spans}) == 3  # one trace per rollout, not one per job
    assert JOB_TRACE_ID not in {span.context.trace_id for span in spans}
    assert spans[0].links[0].context.trace_state.get("vendor") == "1"


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_job_as_parent_when_asked(loop: Any, telemetry: Any, how: str) -> None:
    environ = {"TRACEPARENT": TRACEPARENT, "BAGGAGE": "ci.job=nightly-42"}
    if how == "environment":
        module = loop({**environ, "OTEL_PYTHON_GYM_JOB_CONTEXT": "parent"})
    else:
        module = loop(environ, job_context="parent")
    module.send_row(dict(ROWS[0]))
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.context.trace_id == JOB_TRACE_ID
    assert span.parent.span_id == JOB_SPAN_ID and span.parent.is_remote
    assert span.links == ()


def test_a_dispatch_with_a_parent_is_not_touched(loop: Any, telemetry: Any) -> None:
    """A server that got its context over HTTP, or a collector inside its own span: the parent stays."""
    module = loop({"TRACEPARENT": TRACEPARENT})
    with telemetry.tracer_provider.get_tracer("test").start_as_current_span("request") as parent:
        module.send_row(dict(ROWS[0]))
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.parent.span_id == parent.get_span_context().span_id
    assert span.links == ()


def test_only_dispatches_are_tied_to_the_job(loop: Any, telemetry: Any) -> None:
    module = loop({"TRACEPARENT": TRACEPARENT})
    assert module.score({"result": {"reward": 1.0}}) == {"reward": 1.0}
    (span,) = telemetry.spans(semconv.SPAN_VERIFY)
    assert span.links == () and span.parent is None


@pytest.mark.parametrize("environ", [{}, {"TRACEPARENT": TRACEPARENT, "OTEL_PYTHON_GYM_JOB_CONTEXT": "ignore"}])
def test_no_job_context(loop: Any, telemetry: Any, environ: dict[str, str]) -> None:
    module = loop(environ)
    module.send_row(dict(ROWS[0]))
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.links == () and span.parent is None


def test_a_bad_traceparent_or_mode_is_logged_and_the_dispatch_still_traced(
    loop: Any, telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gym_instrument"):
        module = loop({"TRACEPARENT": "00-not-a-traceparent", "OTEL_PYTHON_GYM_JOB_CONTEXT": "sideways"})
    assert "TRACEPARENT" in caplog.text and "OTEL_PYTHON_GYM_JOB_CONTEXT" in caplog.text
    assert module.send_row(dict(ROWS[0])) == {"echo": ROWS[0]}
    (span,) = telemetry.spans(semconv.SPAN_DISPATCH)
    assert span.links == ()


def test_a_bad_mode_in_code_raises(instrument: Any) -> None:
    with pytest.raises(ValueError, match="job context"):
        instrument(job_context="sideways")


def test_the_job_span_is_not_made_current(loop: Any, telemetry: Any) -> None:
    loop({"TRACEPARENT": TRACEPARENT})
    assert not trace.get_current_span().get_span_context().is_valid
