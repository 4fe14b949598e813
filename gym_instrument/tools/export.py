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

A run of several processes (NeMo Gym's collector and servers, each under the launcher, all given
the same environment) names a folder instead: a value ending in ``/``, or an existing directory.
Each process then writes a file of its own in it, ``<host>-<pid>-<random>.jsonl``, made new
(never an existing file, never through a symbolic link) and opened when the process first
exports; a forked child that exports gets a file of its own too. ``gym-instrument report FOLDER``
reads them all.

A path that cannot be written (a directory, a path under a file, no permission) never stops the
program or the rest of the instrumentation: the exporter says so in one log line naming the
variable and the reason, and drops what it is given.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
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


# A file made new: never one already there, never through a symbolic link, not inherited by exec.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class _FolderLines:
    """A file of this process's own in a folder, made when the process first writes (a forked child
    that writes makes its own): whole lines, under one lock."""

    closed = False

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._folder = folder
        self._lock = threading.Lock()
        self._pid = -1
        self._fd = -1

    def _own_file(self) -> int:
        pid = os.getpid()
        if self._pid != pid:  # first write, or the first in a forked child: the parent's fd is not ours
            host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:64] or "host"
            name = f"{host}-{pid}-{secrets.token_hex(3)}.jsonl"
            self._fd = os.open(self._folder / name, _NEW_FILE, 0o600)
            self._pid = pid
        return self._fd

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        with self._lock:
            try:
                fd = self._own_file()
                view = memoryview(data)
                while view:  # one write() for a whole line, unless the kernel takes less
                    view = view[os.write(fd, view) :]
            except OSError as error:
                _unwritable(str(self._folder), error)
        return len(text)

    def flush(self) -> None:
        pass  # every line is written whole by write()


class _Nowhere:
    """Where the lines go when the file cannot be opened: nowhere."""

    closed = False

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


_FILES: dict[Path, _SharedLines | _FolderLines | _Nowhere] = {}
_FILES_LOCK = threading.Lock()


def json_file_path(environ: Any = None) -> Path:
    """The file the exporters write to: ``OTEL_PYTHON_GYM_JSON_FILE``, else the default, made absolute."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(ENV_JSON_FILE, "").strip() or DEFAULT_JSON_FILE).expanduser().resolve()


def _names_folder(given: str, resolved: Path) -> bool:
    """A value ending in a path separator, or naming an existing directory: one file per process in it."""
    return given.endswith(("/", os.sep)) or resolved.is_dir()


def _shared(path: str | os.PathLike[str] | None) -> Any:
    """The lines every exporter of ``path`` (None: the setting's) writes to; never raises."""
    given = os.environ.get(ENV_JSON_FILE, "").strip() if path is None else os.fspath(path)
    try:
        resolved = Path(path).resolve() if path is not None else json_file_path()
        with _FILES_LOCK:
            lines = _FILES.get(resolved)
            if lines is None or lines.closed:
                folder = _names_folder(given, resolved)
                lines = _FILES[resolved] = _FolderLines(resolved) if folder else _SharedLines(resolved)
            return lines
    except Exception as error:  # the program and the rest of the instrumentation go on
        _unwritable(given, error)
        return _Nowhere()


def _unwritable(given: str, error: BaseException) -> None:
    """Say once per path that it cannot be written."""
    reason = getattr(error, "strerror", None) or type(error).__name__
    with _FILES_LOCK:
        warned = given in _UNWRITABLE
        _UNWRITABLE.add(given)
    if not warned:
        _LOG.error(
            "gym_instrument: %s=%r cannot be written (%s); spans and metrics to it are dropped", ENV_JSON_FILE, given, reason
        )


_UNWRITABLE: set[str] = set()  # paths already said to be unwritable (the traces' and the metrics' exporter share one line)


class JsonFileSpanExporter(FileSpanExporter):
    """OTLP/JSON span batches, one a line, appended to ``OTEL_PYTHON_GYM_JSON_FILE`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(stream=_shared(path))


class JsonFileMetricExporter(FileMetricExporter):
    """OTLP/JSON metric batches, one a line, appended to ``OTEL_PYTHON_GYM_JSON_FILE`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, **options: Any) -> None:
        super().__init__(stream=_shared(path), **options)
