"""The tracer and the metric tallies one ``instrument()`` (or one decorator) records with."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import metrics, trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER

from gym_instrument import semconv
from gym_instrument.compat import PROVIDER_ATTRIBUTE
from gym_instrument.record.failures import FAILURES
from gym_instrument.record.metrics import SCHEMA_URL, tallies_for
from gym_instrument.version import __version__


class Recorder:
    """The tracer and the metric tallies one ``instrument()`` (or one decorator) records with."""

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.cached_tracer: trace.Tracer | None = None  # once resolved
        self.tallies = tallies_for(meter_provider)
        self._provider_from_environment = OTEL_PYTHON_TRACER_PROVIDER in os.environ
        # Whether "no SDK" is known from the API's global-provider attribute alone (None: it is not):
        # read as ``getattr(trace, recorder.global_provider) is None``, in tracer() and Plan.admit.
        self.global_provider = PROVIDER_ATTRIBUTE if tracer_provider is None and not self._provider_from_environment else None

    # -- tracing -------------------------------------------------------------------------------

    def tracer(self) -> trace.Tracer | None:
        """The tracer, or None when nothing would record (no SDK). Suppression is the caller's check."""
        tracer = self.cached_tracer
        if tracer is not None:
            return tracer
        global_provider = self.global_provider
        if global_provider is not None and getattr(trace, global_provider, trace) is None:
            # No global provider is set yet: known without get_tracer_provider(), which reads
            # os.environ on every call until one is set (most of a call's cost with no SDK).
            return None
        return self._resolve_tracer()

    def _resolve_tracer(self) -> trace.Tracer | None:
        provider = self._tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            return None  # no SDK yet: checked again on the next call, so a later SDK is picked up
        tracer = trace.get_tracer(semconv.INSTRUMENTATION_NAME, __version__, provider, schema_url=SCHEMA_URL)
        if isinstance(tracer, trace.NoOpTracer):
            return None
        self.cached_tracer = tracer
        return tracer

    # -- metrics (bounded attributes only: never ids, rewards or free text) ----------------------

    def count(self, metric: str, attributes: Mapping[str, str] | None = None, amount: int = 1) -> None:
        """Add ``amount`` to a metric point (the rare counts: verdicts per health pass, evictions)."""
        try:
            self.tallies.of(metric, attributes).add(amount)
        except Exception:
            FAILURES.failed("counting the metric", metric)
