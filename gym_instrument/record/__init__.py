"""Record: spans and metrics with the OpenTelemetry API only, attribute values checked against what
an OTLP exporter can encode, failures logged once, and the job context a process was started for.

The bottom layer of the package (above ``compat``, ``semconv`` and ``version``): it imports
nothing of the layers above.
"""
