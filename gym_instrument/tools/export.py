"""OTLP/JSON lines into a file of your choosing, for zero-code runs: the exporters named
``gym_json_file`` (``opentelemetry_traces_exporter`` and ``opentelemetry_metrics_exporter`` entry
points), so that::

    OTEL_TRACES_EXPORTER=gym_json_file OTEL_METRICS_EXPORTER=gym_json_file \\
    OTEL_PYTHON_GYM_JSON_FILE=out/spans.jsonl opentelemetry-instrument python train.py

writes every span and metric batch to ``out/spans.jsonl`` (appended; its folder is made), whatever
the program prints. OpenTelemetry's own file exporter (``otlp_json_file``), which the launcher
builds without arguments, writes to standard output, where a program's own output (inspect-ai's
display, a progress bar, a ``print``) lands between the batches and the file cannot be read as
JSON lines. These are that exporter (``opentelemetry-exporter-otlp-json-file``, in the ``report``
extra) given a file: same encoding, one batch a line. Traces and metrics share one open file per
path and write whole lines under one lock, so their lines never interleave.

The SDK builds exporters with no arguments, so the path is read from the environment here:
``OTEL_PYTHON_GYM_JSON_FILE`` (default ``gym-telemetry.jsonl`` in the working directory).

A path that cannot be written (a directory, a path under a file, no permission) never stops the
program or the rest of the instrumentation: the exporter says so in one log line naming the
variable and the reason, and drops what it is given.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

from gym_instrument.config.settings import ENV_JSON_FILE

_LOG = logging.getLogger(__name__)

DEFAULT_JSON_FILE = "gym-telemetry.jsonl"


class _SharedLines:
    """One open file for every exporter of the process that writes to its path: whole lines, under one lock."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, text: str) -> int:
        with self._lock:
            written = self._file.write(text)
            self._file.flush()
        return written

    def flush(self) -> None:
        pass  # every write is flushed with its line


class _Nowhere:
    """Where the lines go when the file cannot be opened: nowhere."""

    closed = False

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


_FILES: dict[Path, _SharedLines | _Nowhere] = {}
_FILES_LOCK = threading.Lock()


def json_file_path(environ: Any = None) -> Path:
    """The file the exporters write to: ``OTEL_PYTHON_GYM_JSON_FILE``, else the default, made absolute."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(ENV_JSON_FILE, "").strip() or DEFAULT_JSON_FILE).expanduser().resolve()


def _shared(path: str | os.PathLike[str] | None) -> Any:
    """The lines every exporter of ``path`` (None: the setting's) writes to; never raises."""
    given = os.environ.get(ENV_JSON_FILE, "") if path is None else os.fspath(path)
    try:
        resolved = Path(path).resolve() if path is not None else json_file_path()
        with _FILES_LOCK:
            lines = _FILES.get(resolved)
            if lines is None or lines.closed:
                lines = _FILES[resolved] = _SharedLines(resolved)
            return lines
    except Exception as error:  # the program and the rest of the instrumentation go on
        reason = getattr(error, "strerror", None) or type(error).__name__
        with _FILES_LOCK:
            warned = given in _UNWRITABLE
            _UNWRITABLE.add(given)
        if not warned:
            _LOG.error(
                "gym_instrument: %s=%r cannot be written (%s); spans and metrics to it are dropped", ENV_JSON_FILE, given, reason
            )
        return _Nowhere()


_UNWRITABLE: set[str] = set()  # paths already said to be unwritable (the traces' and the metrics' exporter share one line)


class JsonFileSpanExporter(FileSpanExporter):
    """OTLP/JSON span batches, one a line, appended to ``OTEL_PYTHON_GYM_JSON_FILE`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(stream=_shared(path))


class JsonFileMetricExporter(FileMetricExporter):
    """OTLP/JSON metric batches, one a line, appended to ``OTEL_PYTHON_GYM_JSON_FILE`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, **options: Any) -> None:
        super().__init__(stream=_shared(path), **options)
