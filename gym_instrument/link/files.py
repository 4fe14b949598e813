"""Persisted links: ended dispatches' span contexts on disk, for a health pass in another process.

A process that dispatches under tracing writes, for each ended dispatch, one line of ids: trace
id, span id, trace flags, task index, rollout index, attempt, a custom rollout id and, where a
target names rollouts by task id (``by_task``), the task id, percent-encoded (never row
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

Reading streams: files are read line by line (no line of more than ``lines.LINE_LIMIT`` bytes
held), oldest writer first, into a :class:`DispatchLinks` of the configured capacity, keeping only
the dispatches the verdicts name (a folder full of other rollouts never evicts them), so a later
attempt replaces an earlier one and each dispatch is found at most once, exactly as in-process.

Trust: a health pass reads a links file only when it can attribute it to the run. The folder (a
``.gym-links`` folder is never followed as a symbolic link) must be owned by the reading user or
root and not writable by others; the file must be a regular file, not a symbolic link, not
writable by group or others, and owned by the reading user, or by root in a folder only its owner
can write (checked on the open file, which is opened without blocking: a FIFO never hangs a pass).
A folder its group can write (``mkdir`` under umask 002 makes 0775, the default on many clusters)
is used: a file planted there by anyone else is not the user's own, and is skipped. Anything else
is skipped with one log line naming it. Folders are made 0700 and files 0600 whatever the umask.
A header's start time counts no later than the file's modification time (and now), so a header
cannot make its entries win by claiming a future time. A links file's name holds at most
``_NAME_BYTES`` bytes of the output's name (a longer one is cut and a hash of it added).
"""

from __future__ import annotations

import atexit
import glob
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from opentelemetry import context
from opentelemetry.trace import SpanContext

from gym_instrument.compat import span_context, span_id_of, trace_flags_of, trace_id_of
from gym_instrument.lines import bounded_lines, too_long
from gym_instrument.link.identity import RolloutIdentity, parse_index_form
from gym_instrument.link.memory import DispatchLink, DispatchLinks, RolloutName

_LOG = logging.getLogger(__name__)

FOLDER = ".gym-links"  # hidden: glob's * and ** never match it
SUFFIX = ".links"  # not .jsonl: no rollout glob matches it either
FORMAT = 1
# The run a dispatch belongs to, while a run function (``run`` role) runs: its output file's path.
RUN_OUTPUT_KEY = context.create_key("gym_instrument.run_output")

_WAKE_AT = 2 * 512  # pending list items (two per dispatch) that wake the writer
_FLUSH_SECONDS = 1.0
_JOIN_SECONDS = 5.0  # how long close() waits for the writer thread to end
_CHUNK = 1 << 16  # verdicts whose links are made at once
_PROGRESS_BYTES = 64 << 20  # reads longer than this report their progress
FOLDER_MODE, FILE_MODE = 0o700, 0o600  # whatever the umask: only the run's user reads or writes links
_NAME_BYTES = 100  # of the output's name in a links file's name (a file name may be 255 bytes)
_HOST_CHARACTERS = 64
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def _number(value: Any) -> Any:
    return value if type(value) is int and value >= 0 else "-"


_TASK_ID_CHARACTERS = 512  # a longer task id is not written (its dispatch is found by its other ids)


def _task_column(identity: RolloutIdentity) -> str:
    task_id = identity.task_id
    if type(task_id) is not str or not task_id or len(task_id) > _TASK_ID_CHARACTERS:
        return "-"
    return quote(task_id, safe="")


def _line_with_task(context_: SpanContext, identity: RolloutIdentity) -> str:
    """:func:`_line` with the task id as an eighth column."""
    return _line(context_, identity)[:-1] + " " + _task_column(identity) + "\n"


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

    def __init__(self, folder: Path, output: str | None, by_task: bool = False) -> None:
        self.line = _line_with_task if by_task else _line
        token = f"{socket.gethostname()[:_HOST_CHARACTERS]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = folder / f"{file_name_of(output)}.{token}{SUFFIX}"
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
        data = "".join(map(self.line, entries[0::2], entries[1::2])).encode("ascii")
        if self.fd is None:
            self.fd = _create(self.path)
            _write_all(self.fd, (json.dumps(self.header) + "\n").encode())
        _write_all(self.fd, data)  # whole lines, in one write when the system allows


def file_name_of(output: str | None) -> str:
    """The part of a links file's name that says its output: the output's file name, or at most
    ``_NAME_BYTES`` bytes of it and a hash of the whole (the header names it in full)."""
    name = Path(output).name if output else "run"
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= _NAME_BYTES:
        return name
    import hashlib  # only an output name too long for a file name needs it: not at every start

    return raw[: _NAME_BYTES - 33].decode("utf-8", "ignore") + "~" + hashlib.sha256(raw).hexdigest()[:32]


def _create(path: Path) -> int:
    """A new links file (0600), in its folder (made 0700) if the folder can be trusted; OSError if not."""
    folder = path.parent
    folder.parent.mkdir(parents=True, exist_ok=True)  # the user's own folders, as their umask makes them
    try:
        os.mkdir(folder, FOLDER_MODE)
    except FileExistsError:
        pass
    else:
        os.chmod(folder, FOLDER_MODE)  # whatever the umask
    problem = folder_problem(folder, follow=folder.name != FOLDER)
    if problem is not None:
        raise PermissionError(f"{folder} {problem}: no health pass would read links there")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd


def folder_problem(folder: Path, follow: bool) -> str | None:
    """Why links in ``folder`` cannot be attributed to this user's runs (None: they can): not a
    folder, a symbolic link (unless ``follow``: a folder the user named), owned by another user than
    this one or root, or writable by others. A folder its group can write is used: only the user's
    own files are read there (:func:`_open_trusted`)."""
    try:
        info = os.stat(folder) if follow else os.lstat(folder)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    return _owner_problem(info) or (
        f"is writable by others (mode {stat.S_IMODE(info.st_mode):04o})" if info.st_mode & stat.S_IWOTH else None
    )


def _user() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None  # (no owners to compare where there is no geteuid)


def _owner_problem(info: os.stat_result) -> str | None:
    user = _user()
    if user is None or info.st_uid in (user, 0):
        return None
    return f"is owned by uid {info.st_uid}, neither this user ({user}) nor root"


def _file_problem(path: Path, info: os.stat_result) -> str | None:
    """Why an open links file cannot be attributed to this user's runs (None: it can)."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    problem = _owner_problem(info)
    if problem is not None or info.st_uid == _user():
        return problem
    # Root's: trusted where only the folder's owner can put a file. A group member cannot make a
    # file of root's, but could link one of another run into a folder the group can write.
    try:
        shared = os.stat(path.parent).st_mode & stat.S_IWGRP
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    return f"is owned by root, not this user ({_user()}), in a folder its group can write" if shared else None


def _open_trusted(path: Path) -> tuple[Any, os.stat_result] | str:
    """``path`` opened for reading (binary) and its status, if it can be attributed to this user's
    runs (:func:`_file_problem`); else why not. Opened without blocking: a FIFO is never waited on."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        return "is a symbolic link" if os.path.islink(path) else f"cannot be read ({error.strerror or error})"
    try:
        info = os.fstat(fd)
        problem = _file_problem(path, info)
        if problem is None:
            return os.fdopen(fd, "rb"), info
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    os.close(fd)
    return problem


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LinkFiles:
    """Where this process persists its dispatches' links and where a health pass reads them.

    ``directory``: the folder a setting names (None: beside the run's output only). ``enabled``:
    False persists nothing and reads nothing. ``capacity``: dispatches a read holds at once."""

    def __init__(self, directory: str | None, enabled: bool = True, capacity: int = 1_000_000, by_task: bool = False) -> None:
        self.directory = Path(directory) if directory else None
        self.enabled = enabled
        self.capacity = capacity
        self.by_task = by_task  # a target names rollouts by task id: task ids are written and read too
        self._writers: dict[str | None, _Writer] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: the thread's, at exit, before a read
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()
        self._finding = threading.Lock()  # one verify's lookup at a time reads and replaces _found
        self._found: dict[str | None, _Found] = {}  # by run output: what verifies after their dispatch read
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
            if not output and self.directory is None:
                return  # (nowhere known, as folder_for says: told without its call, on every dispatch of such a run)
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
                writer = self._writers[output] = _Writer(folder, output, self.by_task)
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
            fd = _create(writer.path)
            try:
                _write_all(fd, (json.dumps(writer.header) + "\n").encode())
            finally:
                os.close(fd)
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
        """Write what is queued, stop the writer thread and close the files (a later persist opens
        them again, with a thread of its own)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            self._wake.set()  # it wakes, flushes, sees it is no longer the writer and ends
            thread.join(_JOIN_SECONDS)  # (bounded: a file system that hangs never hangs the host)
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
        me = threading.current_thread()
        while self._thread is me:
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
        self._finding = threading.Lock()
        self._found = {}

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning(message, *args)

    # -- reading -----------------------------------------------------------------------------

    def lookup(self, rollout_paths: Iterable[str], verdicts: Sequence[RolloutName]) -> Iterator[DispatchLink | None]:
        """For each verdict name in turn, the persisted dispatch of the run of ``rollout_paths`` it
        names (None where none is): the files are read streaming into a memory of ``capacity`` when
        the first is asked for, keeping only the dispatches the verdicts name, and the links are made
        a chunk at a time (a million verdicts never hold a million links at once); each dispatch is
        found at most once."""
        memory = self._load(rollout_paths, _Named(verdicts)) if self.enabled and verdicts else None
        if memory is None:
            yield from repeat(None, len(verdicts))
            return
        for start in range(0, len(verdicts), _CHUNK):
            yield from memory.take_many(verdicts[start : start + _CHUNK])

    def find(self, output: str | None, names: Sequence[RolloutName]) -> list[DispatchLink | None]:
        """For each name, the persisted dispatch of another process it names (None where none is),
        kept for the next lookup (a verify after its dispatch: several may score one rollout): the
        links of the run writing ``output`` (the run in context), else of the runs of no known
        output in the folder a setting names. Every dispatch of those files is read once into a
        memory of ``capacity``, read again when they changed and a name was not found (at most
        once a second)."""
        if not self.enabled or not names:
            return [None] * len(names)
        with self._finding:
            found = self._found.get(output)
            if found is None:
                found = self._found[output] = _Found()
            links: list[DispatchLink | None] = [None] * len(names)
            if found.links is not None:
                links = found.links.find_many(names)
            if None in links and time.monotonic() >= found.listed_at + _FLUSH_SECONDS:
                found.listed_at = time.monotonic()
                files = self._files_of([output]) if output else self._files_of_no_output()
                sizes = {path: size for path, _, size in files}
                if sizes != found.sizes:
                    found.sizes = sizes
                    found.links = self._read_all(files)
                    links = found.links.find_many(names) if found.links is not None else links
            return links

    def _files_of_no_output(self) -> list[tuple[Path, int, int]]:
        """The links files in the folder a setting names whose runs named no output, oldest writer first."""
        if self.directory is None:
            return []
        files = self._folder(self.directory, False).by_output.get(None, [])
        return sorted(((path, started, size) for path, _, started, size in files), key=lambda item: (item[1], str(item[0])))

    def _read_all(self, files: list[tuple[Path, int, int]]) -> DispatchLinks | None:
        """Every dispatch of ``files`` (oldest writer first: a later one replaces an earlier one)."""
        if not files:
            return None
        memory = DispatchLinks(self.capacity, by_task=self.by_task)
        progress = _Progress(sum(size for _, _, size in files))
        for path, _, _ in files:
            for span_context_, identity in self._entries(path, progress, _EVERY):
                memory.remember(span_context_, identity)
        progress.done()
        return memory

    def _load(self, rollout_paths: Iterable[str], named: _Named) -> DispatchLinks | None:
        """The persisted dispatches ``named`` names of the runs that wrote ``rollout_paths``, oldest
        writer first (a later dispatch of the same rollout replaces an earlier one); None when there
        are none."""
        self.flush()
        files = self._files_of(rollout_paths)
        if not files:
            return None
        memory = DispatchLinks(self.capacity, by_task=bool(named.tasks))
        progress = _Progress(sum(size for _, _, size in files))
        remember = memory.remember
        for path, _, _ in files:
            for span_context_, identity in self._entries(path, progress, named):
                remember(span_context_, identity)
        progress.done()
        return memory

    def _files_of(self, rollout_paths: Iterable[str]) -> list[tuple[Path, int, int]]:
        """The links files of the runs that wrote ``rollout_paths`` (and of shards merged into them),
        oldest writer first: (path, started, size). Each folder is listed, and each header read, once."""
        wanted: set[str] = set()
        queue = [_absolute(path) for path in rollout_paths]
        found: dict[Path, tuple[int, int]] = {}
        folders: dict[tuple[Path, bool], _Folder] = {}
        while queue:
            output = queue.pop()
            if output in wanted:
                continue
            wanted.add(output)
            output_path = Path(output)
            for folder, by_name in ((output_path.parent / FOLDER, True), (self.directory, False)):
                if folder is None:
                    continue
                listed = folders.get((folder, by_name))
                if listed is None:
                    listed = folders[folder, by_name] = self._folder(folder, by_name)
                # Beside the output, its name says it (the folder moves with the run: another machine,
                # another mount); in the named folder, its absolute path (or none: a run whose output
                # the framework's schema does not know, whose links only such a folder holds).
                for candidate, header, started, size in listed.named(output_path.name if by_name else output):
                    if candidate in found:
                        continue
                    merged = header.get("merged")
                    if isinstance(merged, list):
                        queue.extend(_absolute(output_path.parent / str(source)) for source in merged)
                        continue
                    found[candidate] = (started, size)
        return sorted(
            ((path, started, size) for path, (started, size) in found.items()), key=lambda item: (item[1], str(item[0]))
        )

    def _folder(self, folder: Path, by_name: bool) -> _Folder:
        """The links files of ``folder`` that can be trusted, with their headers, by the output they name."""
        listed = _Folder(by_name)
        if not os.path.lexists(folder):
            return listed
        # A .gym-links folder beside an output is never followed as a link; a folder the user named may be one.
        problem = folder_problem(folder, follow=not by_name)
        if problem is not None:
            self._warn_once(
                f"folder:{folder}", "gym_instrument: dispatch links folder %s %s; its links are not read", folder, problem
            )
            return listed
        with self._lock:
            own = {str(writer.path) for writer in self._writers.values()}
        # This process's own dispatches were in its memory: a verdict that did not find one there
        # (found already in this process, or never traced) must not find it again here.
        for candidate in sorted(glob.glob(os.path.join(glob.escape(str(folder)), "*" + SUFFIX))):
            if candidate in own:
                continue
            read = self._header(Path(candidate))
            if read is not None:
                listed.add(Path(candidate), *read)
        return listed

    def _skip(self, path: Path, problem: str) -> None:
        self._warn_once(f"skip:{path}", "gym_instrument: dispatch links file %s %s; skipped", path, problem)

    def _header(self, path: Path) -> tuple[dict[str, Any], int, int] | None:
        """A trusted links file's header, when it started (no later than the file's last change, nor
        than now) and its size; None (and a log line) for anything else."""
        opened = _open_trusted(path)
        if isinstance(opened, str):
            self._skip(path, opened)
            return None
        file, info = opened
        with file:
            try:
                first = next(bounded_lines(file), None)
            except OSError as error:
                self._skip(path, f"cannot be read ({error.strerror or error})")
                return None
        if first is None:
            _LOG.info("gym_instrument: dispatch links file %s is empty; skipped", path)
            return None
        if first.data is None:
            self._skip(path, "is not a dispatch links file: " + too_long(path, first).partition(": ")[2])
            return None
        try:
            header = json.loads(first.data)
        except (ValueError, RecursionError):
            header = None
        if not isinstance(header, dict) or header.get("gym_links") != FORMAT:
            self._skip(path, "is not a dispatch links file of this version")
            return None
        started = header.get("started_ns")
        started = started if type(started) is int and started >= 0 else 0
        return header, min(started, info.st_mtime_ns, time.time_ns()), info.st_size

    def _entries(self, path: Path, progress: _Progress, named: _Named) -> Iterator[tuple[SpanContext, RolloutIdentity]]:
        bad = 0
        opened = _open_trusted(path)
        if isinstance(opened, str):
            self._skip(path, opened)
            return
        file, _ = opened
        try:
            with file:
                for line in bounded_lines(file):
                    progress.add(line.size)
                    if line.number == 1:
                        continue  # the header
                    data = line.data
                    if data is None:
                        _LOG.warning("gym_instrument: dispatch links file %s", too_long(path, line))
                        continue
                    if not data.endswith(b"\n"):
                        _LOG.warning("gym_instrument: dispatch links file %s ends in a torn line; it is skipped", path)
                        break
                    entry = _parse(data, named)
                    if entry is None:
                        bad += 1
                    elif entry is not _UNNAMED:
                        yield entry
        except OSError as error:
            self._warn_once(f"read:{path}", "gym_instrument: cannot read dispatch links file %s: %s", path, error)
        if bad:
            _LOG.warning("gym_instrument: %d unreadable lines in dispatch links file %s were skipped", bad, path)


class _Folder:
    """A folder's trusted links files and their headers, by the output they name (its file name
    beside the output, its absolute path in a named folder, where a header of no path matches any)."""

    def __init__(self, by_name: bool) -> None:
        self.by_name = by_name
        self.by_output: dict[str | None, list[tuple[Path, dict[str, Any], int, int]]] = {}

    def add(self, path: Path, header: dict[str, Any], started: int, size: int) -> None:
        key = header.get("output") if self.by_name else header.get("output_path")
        self.by_output.setdefault(key if isinstance(key, str) else None, []).append((path, header, started, size))

    def named(self, output: str) -> list[tuple[Path, dict[str, Any], int, int]]:
        files = self.by_output.get(output, [])
        return files if self.by_name else files + self.by_output.get(None, [])


class _Named:
    """The rollouts a health pass's verdicts name: by indices (from the verdict, or its rollout id's
    index form) or by a custom rollout id. Only these are read from the files."""

    def __init__(self, verdicts: Sequence[RolloutName]) -> None:
        self.indices: set[int | tuple[int, int]] = set()
        self.custom_ids: set[bytes] = set()
        self.tasks: set[tuple[str, int]] = set()  # (task id, repeat)
        for verdict in verdicts:
            rollout_id, task_index, rollout_index = verdict[:3]
            if len(verdict) > 3 and type(verdict[3]) is str and type(rollout_index) is int:
                self.tasks.add((verdict[3], rollout_index))
            if type(task_index) is int and type(rollout_index) is int:
                self.indices.add(_indices_key(task_index, rollout_index))
            if isinstance(rollout_id, str):
                parsed = parse_index_form(rollout_id)
                if parsed is None:
                    if rollout_id.isascii() and rollout_id != "-":
                        self.custom_ids.add(rollout_id.encode("ascii"))
                else:
                    self.indices.add(_indices_key(parsed[0], parsed[1]))


class _Every:
    """Holds every key: a read of every dispatch of the files (:meth:`LinkFiles.find`)."""

    def __contains__(self, key: object) -> bool:
        return True


class _EveryName:
    """Names every rollout (:func:`_parse` keeps every line)."""

    indices: Any = _Every()
    custom_ids: Any = _Every()
    tasks: Any = _Every()


_EVERY: Any = _EveryName()


class _Found:
    """What :meth:`LinkFiles.find` read for one run: its dispatches, the files' sizes then, when it listed them."""

    __slots__ = ("links", "listed_at", "sizes")

    def __init__(self) -> None:
        self.links: DispatchLinks | None = None
        self.sizes: dict[Path, int] = {}
        self.listed_at = -float("inf")


def _indices_key(task_index: int, rollout_index: int) -> int | tuple[int, int]:
    return (task_index << 32) | rollout_index if 0 <= rollout_index < 1 << 32 else (task_index, rollout_index)


_UNNAMED: Any = object()  # a well-formed line of a rollout no verdict names


def _parse(line: bytes, named: _Named) -> tuple[SpanContext, RolloutIdentity] | None:
    """A line's dispatch; None for a malformed line, ``_UNNAMED`` for one of a rollout ``named`` does not name."""
    parts = line.split()
    if len(parts) == 8:  # with the task id
        task_id = None if parts[7] == b"-" else unquote(parts[7].decode("ascii"), errors="strict")
    elif len(parts) == 7:
        task_id = None
    else:
        return None
    trace_hex, span_hex, flags_hex, task, rollout, attempt, custom = parts[:7]
    try:
        task_index = None if task == b"-" else int(task)
        rollout_index = None if rollout == b"-" else int(rollout)
        if (task_index or 0) < 0 or (rollout_index or 0) < 0:
            return None
        if (
            custom not in named.custom_ids
            and (task_index is None or rollout_index is None or _indices_key(task_index, rollout_index) not in named.indices)
            and (task_id is None or (task_id, rollout_index) not in named.tasks)
        ):
            return _UNNAMED  # type: ignore[no-any-return]
        trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
        sampled = int(flags_hex, 16) & 1
        attempt_index = None if attempt == b"-" else int(attempt)
        custom_id = None if custom == b"-" else custom.decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return None
    if not (0 < trace_id < 1 << 128 and 0 < span_id < 1 << 64):
        return None
    identity = RolloutIdentity(task_id, task_index, rollout_index, attempt_index, custom_id, custom_id is not None)
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
