"""Persisted links: ended dispatches' span contexts on disk, for a health pass in another process.

A process that dispatches under tracing writes, for each ended dispatch, one line of ids: trace
id, span id, trace flags, task index, rollout index, attempt and a custom rollout id (never row
content). Lines go to a file of their own per process and run, under a hidden folder no rollout
glob matches::

    <run dir>/.gym-links/<output file name>.<host>-<pid>-<random>.links      (beside the output)
    $OTEL_PYTHON_GYM_LINK_DIR/<output file name>.<host>-<pid>-<random>.links (a named folder)

The first line is a JSON header naming the run's output file (its name and absolute path) and when
the writer started; a merge record (``gym eval aggregate``) is a header alone naming the shards the
output was merged from. A health pass over ``rollouts.jsonl`` reads only files whose header names
that output (or a shard merged into it): a file of another run is never read, whatever its ids.

Writing is off the dispatch's path: a dispatch appends two references to a list; a daemon thread
writes whole lines in batches (and at exit, and before a health pass in the same process reads),
each batch one ``write`` of complete lines, so a process killed mid-run leaves whole lines (a torn
last line is skipped with a log line).

Reading streams: files are read line by line, oldest writer first, into a :class:`DispatchLinks`
of the configured capacity, so a later attempt replaces an earlier one and each dispatch is found
at most once, exactly as in-process.
"""

from __future__ import annotations

import atexit
import glob
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any

from opentelemetry import context
from opentelemetry.trace import SpanContext

from gym_instrument.compat import span_context, span_id_of, trace_flags_of, trace_id_of
from gym_instrument.link.identity import RolloutIdentity
from gym_instrument.link.memory import DispatchLink, DispatchLinks

_LOG = logging.getLogger(__name__)

FOLDER = ".gym-links"  # hidden: glob's * and ** never match it
SUFFIX = ".links"  # not .jsonl: no rollout glob matches it either
FORMAT = 1
# The run a dispatch belongs to, while a run function (``run`` role) runs: its output file's path.
RUN_OUTPUT_KEY = context.create_key("gym_instrument.run_output")

_WAKE_AT = 2 * 512  # pending list items (two per dispatch) that wake the writer
_FLUSH_SECONDS = 1.0
_CHUNK = 1 << 16  # verdicts whose links are made at once
_PROGRESS_BYTES = 64 << 20  # reads longer than this report their progress


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def _number(value: Any) -> Any:
    return value if type(value) is int and value >= 0 else "-"


def _line(context_: SpanContext, identity: RolloutIdentity) -> str:
    """One dispatch's line: trace id, span id, flags, task index, rollout index, attempt, custom id."""
    custom = identity.rollout_id if identity.custom_id and identity.rollout_id else "-"
    if custom != "-" and (not custom.isascii() or len(custom.split()) != 1):
        custom = "-"  # (found by its indices only)
    return "%032x %016x %02x %s %s %s %s\n" % (  # noqa: UP031  (the fastest formatting, on the writer thread)
        trace_id_of(context_),
        span_id_of(context_),
        trace_flags_of(context_),
        _number(identity.task_index),
        _number(identity.rollout_index),
        _number(identity.attempt),
        custom,
    )


class _Writer:
    """One process's links file for one run output (or none), appended to in whole-line batches."""

    def __init__(self, folder: Path, output: str | None) -> None:
        name = Path(output).name if output else "run"
        token = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = folder / f"{name}.{token}{SUFFIX}"
        self.header: dict[str, Any] = {
            "gym_links": FORMAT,
            "output": Path(output).name if output else None,
            "output_path": _absolute(output) if output else None,
            "started_ns": time.time_ns(),
        }
        self.pending: list[Any] = []  # span context, identity, span context, identity, ...
        self.fd: int | None = None

    def flush(self) -> None:
        pending = self.pending
        count = len(pending) & ~1
        if not count:
            return
        entries = pending[:count]
        del pending[:count]
        data = "".join(map(_line, entries[0::2], entries[1::2])).encode("ascii")
        if self.fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _write_all(self.fd, (json.dumps(self.header) + "\n").encode())
        _write_all(self.fd, data)  # whole lines, in one write when the system allows


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LinkFiles:
    """Where this process persists its dispatches' links and where a health pass reads them.

    ``directory``: the folder a setting names (None: beside the run's output only). ``enabled``:
    False persists nothing and reads nothing. ``capacity``: dispatches a read holds at once."""

    def __init__(self, directory: str | None, enabled: bool = True, capacity: int = 1_000_000) -> None:
        self.directory = Path(directory) if directory else None
        self.enabled = enabled
        self.capacity = capacity
        self._writers: dict[str | None, _Writer] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: the thread's, at exit, before a read
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        _ALL.add(self)

    # -- writing -----------------------------------------------------------------------------

    def folder_for(self, output: str | None) -> Path | None:
        """Where the links of a run writing ``output`` go (None: nowhere known)."""
        if self.directory is not None:
            return self.directory
        if output:
            return Path(_absolute(output)).parent / FOLDER
        return None

    def persist(self, span_context_: SpanContext, identity: RolloutIdentity, output: str | None) -> None:
        """Queue an ended dispatch for its run's links file: one append (a thread formats and writes)."""
        writer = self._writers.get(output)
        if writer is None:
            writer = self._writer(output)
            if writer is None:
                return
        pending = writer.pending
        pending.extend((span_context_, identity))
        if len(pending) >= _WAKE_AT:
            self._wake.set()

    def _writer(self, output: str | None) -> _Writer | None:
        folder = self.folder_for(output)
        if folder is None:
            return None
        with self._lock:
            writer = self._writers.get(output)
            if writer is None:
                writer = self._writers[output] = _Writer(folder, output)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gym-instrument-links", daemon=True)
                self._thread.start()
        return writer

    def record_merge(self, output: str, sources: Sequence[str]) -> None:
        """Note that ``output`` is merged from ``sources`` (shards): a later health pass over
        ``output`` reads the shards' links. A header alone, sources relative to the output's folder."""
        folder = self.folder_for(output)
        if folder is None or not sources:
            return
        writer = _Writer(folder, output)
        base = Path(_absolute(output)).parent
        writer.header["merged"] = [os.path.relpath(_absolute(source), base) for source in sources]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(writer.path, "w", encoding="utf-8") as file:
                file.write(json.dumps(writer.header) + "\n")
        except OSError as error:
            self._warn_once(f"write:{folder}", "gym_instrument: cannot write dispatch links in %s: %s", folder, error)

    def flush(self) -> None:
        """Write every queued line now (at exit, and before a health pass reads)."""
        with self._lock:
            writers = list(self._writers.values())
        with self._flushing:
            self._flush(writers)

    def _flush(self, writers: list[_Writer]) -> None:
        for writer in writers:
            try:
                writer.flush()
            except OSError as error:
                writer.pending.clear()
                self._warn_once(
                    f"write:{writer.path.parent}",
                    "gym_instrument: cannot write dispatch links in %s (%s); health passes in other processes "
                    "will not find these dispatches",
                    writer.path.parent,
                    error,
                )

    def close(self) -> None:
        self.flush()
        with self._lock:
            for writer in self._writers.values():
                if writer.fd is not None:
                    try:
                        os.close(writer.fd)
                    except OSError:
                        pass
                    writer.fd = None
            self._writers.clear()

    def _run(self) -> None:
        while True:
            self._wake.wait(_FLUSH_SECONDS)
            self._wake.clear()
            self.flush()

    def _after_fork(self) -> None:
        # A forked child writes its own files (the parent's queued lines are the parent's to write),
        # with fresh locks (one another thread held at the fork would never be released) and thread.
        self._writers = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._wake = threading.Event()
        self._thread = None

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning(message, *args)

    # -- reading -----------------------------------------------------------------------------

    def lookup(
        self, rollout_paths: Iterable[str], verdicts: Sequence[tuple[str | None, int | None, int | None]]
    ) -> Iterator[DispatchLink | None]:
        """For each verdict name in turn, the persisted dispatch of the run of ``rollout_paths`` it
        names (None where none is): the files are read streaming into a memory of ``capacity`` when
        the first is asked for, and the links are made a chunk at a time (a million verdicts never
        hold a million links at once); each dispatch is found at most once."""
        memory = self._load(rollout_paths) if self.enabled and verdicts else None
        if memory is None:
            yield from repeat(None, len(verdicts))
            return
        for start in range(0, len(verdicts), _CHUNK):
            yield from memory.take_many(verdicts[start : start + _CHUNK])

    def _load(self, rollout_paths: Iterable[str]) -> DispatchLinks | None:
        """The persisted dispatches of the runs that wrote ``rollout_paths``, oldest writer first (a
        later dispatch of the same rollout replaces an earlier one); None when there are none."""
        self.flush()
        files = self._files_of(rollout_paths)
        if not files:
            return None
        memory = DispatchLinks(self.capacity)
        progress = _Progress(sum(size for _, _, size in files))
        remember = memory.remember
        for path, _, _ in files:
            for span_context_, identity in self._entries(path, progress):
                remember(span_context_, identity)
        progress.done()
        return memory

    def _files_of(self, rollout_paths: Iterable[str]) -> list[tuple[Path, float, int]]:
        """The links files of the runs that wrote ``rollout_paths`` (and of shards merged into them),
        oldest writer first: (path, started, size)."""
        wanted: set[str] = set()
        queue = [_absolute(path) for path in rollout_paths]
        found: dict[Path, tuple[float, int]] = {}
        # This process's own dispatches were in its memory: a verdict that did not find one there
        # (found already in this process, or never traced) must not find it again here.
        with self._lock:
            own = {str(writer.path) for writer in self._writers.values()}
        while queue:
            output = queue.pop()
            if output in wanted:
                continue
            wanted.add(output)
            output_path = Path(output)
            for folder, by_name in ((output_path.parent / FOLDER, True), (self.directory, False)):
                if folder is None:
                    continue
                for candidate in sorted(glob.glob(os.path.join(glob.escape(str(folder)), "*" + SUFFIX))):
                    if candidate in own or Path(candidate) in found:
                        continue
                    header = self._header(Path(candidate))
                    if header is None:
                        continue
                    # Beside the output, its name says it (the folder moves with the run: another machine,
                    # another mount); in the named folder, its absolute path (or none: a run whose output
                    # the framework's schema does not know, whose links only such a folder holds).
                    if by_name:
                        named = header.get("output") == output_path.name
                    else:
                        named = header.get("output_path") in (output, None)
                    if not named:
                        continue
                    merged = header.get("merged")
                    if isinstance(merged, list):
                        queue.extend(_absolute(output_path.parent / str(source)) for source in merged)
                        continue
                    started = header.get("started_ns")
                    found[Path(candidate)] = (started if isinstance(started, int) else 0, os.path.getsize(candidate))
        return sorted(
            ((path, started, size) for path, (started, size) in found.items()), key=lambda item: (item[1], str(item[0]))
        )

    def _header(self, path: Path) -> dict[str, Any] | None:
        try:
            with open(path, "rb") as file:
                first = file.readline(4096)
        except OSError as error:
            self._warn_once(f"read:{path}", "gym_instrument: cannot read dispatch links file %s: %s", path, error)
            return None
        if not first:
            _LOG.info("gym_instrument: dispatch links file %s is empty; skipped", path)
            return None
        try:
            header = json.loads(first)
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("gym_links") != FORMAT:
            self._warn_once(f"foreign:{path}", "gym_instrument: %s is not a dispatch links file of this version; skipped", path)
            return None
        return header

    def _entries(self, path: Path, progress: _Progress) -> Iterator[tuple[SpanContext, RolloutIdentity]]:
        bad = 0
        try:
            with open(path, "rb") as file:
                progress.add(len(file.readline()))
                for line in file:
                    progress.add(len(line))
                    if not line.endswith(b"\n"):
                        _LOG.warning("gym_instrument: dispatch links file %s ends in a torn line; it is skipped", path)
                        break
                    entry = _parse(line)
                    if entry is None:
                        bad += 1
                        continue
                    yield entry
        except OSError as error:
            self._warn_once(f"read:{path}", "gym_instrument: cannot read dispatch links file %s: %s", path, error)
        if bad:
            _LOG.warning("gym_instrument: %d unreadable lines in dispatch links file %s were skipped", bad, path)


def _parse(line: bytes) -> tuple[SpanContext, RolloutIdentity] | None:
    parts = line.split()
    if len(parts) != 7:
        return None
    trace_hex, span_hex, flags_hex, task, rollout, attempt, custom = parts
    try:
        trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
        sampled = int(flags_hex, 16) & 1
        task_index = None if task == b"-" else int(task)
        rollout_index = None if rollout == b"-" else int(rollout)
        attempt_index = None if attempt == b"-" else int(attempt)
        custom_id = None if custom == b"-" else custom.decode("ascii")
    except ValueError:
        return None
    if not (0 < trace_id < 1 << 128 and 0 < span_id < 1 << 64) or (task_index or 0) < 0 or (rollout_index or 0) < 0:
        return None
    identity = RolloutIdentity(None, task_index, rollout_index, attempt_index, custom_id, custom_id is not None)
    return span_context(trace_id, span_id, bool(sampled)), identity


class _Progress:
    """Progress of a long read: a bar on a terminal, else a log line every tenth."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.read = 0
        self.shown = -1
        self.active = total >= _PROGRESS_BYTES
        self.tty = self.active and sys.stderr.isatty()

    def add(self, count: int) -> None:
        if not self.active:
            return
        self.read += count
        tenth = self.read * 10 // self.total
        if tenth != self.shown:
            self.shown = tenth
            if self.tty:
                sys.stderr.write(f"\rgym_instrument: reading dispatch links [{'#' * tenth:<10}] {tenth * 10}%")
                sys.stderr.flush()
            else:
                _LOG.info("gym_instrument: reading dispatch links: %d%% of %.1f MB", tenth * 10, self.total / 1e6)

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


_ALL: weakref.WeakSet[LinkFiles] = weakref.WeakSet()


def _forget_in_forked_child() -> None:
    for files in list(_ALL):
        files._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)


@atexit.register
def _flush_at_exit() -> None:
    for files in list(_ALL):
        try:
            files.flush()
        except Exception:
            pass
