"""Links from a rollout to its trace in a trace viewer (``--trace-url``)."""

from __future__ import annotations

TRACE_URL_PRESETS = {
    # Arize Phoenix resolves an OpenTelemetry trace id itself (any project).
    "phoenix": "http://127.0.0.1:6006/redirects/traces/{trace_id}",
    # An MLflow tracking server that received the spans over OTLP names the trace "tr-<trace id>";
    # experiment 0 is its Default experiment (the one an OTLP export without x-mlflow-experiment-id header lands in).
    "mlflow": "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}",
}


def trace_url_template(value: str | None) -> str | None:
    """A ``--trace-url`` value: a preset name (``phoenix``, ``mlflow``) or a template with ``{trace_id}``."""
    if not value:
        return None
    template = TRACE_URL_PRESETS.get(value, value)
    try:
        template.format(trace_id="0" * 32, span_id="0" * 16)
    except (KeyError, IndexError, ValueError) as error:
        raise ValueError(f"--trace-url: a template may use {{trace_id}} and {{span_id}} only ({error!r})") from None
    if "{trace_id}" not in template:
        raise ValueError(f"--trace-url: the template has no {{trace_id}}: {template!r}")
    return template


def trace_link(template: str, trace_id: str, span_id: str) -> str:
    return template.format(trace_id=trace_id, span_id=span_id)
