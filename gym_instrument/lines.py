"""Bounded reading: every file the package reads (persisted links, span files, run files, a
configuration) is read through here, so no input holds more than a stated amount in memory.

A line longer than the limit is not kept: it is read past in small pieces and reported as
:class:`Line` with ``data`` None, its number and its size, so the reader can say which line of
which file it skipped and go on with the next one. A whole file (a configuration) is read only
when it is no larger than its limit.

Example::

    with open(path, "rb") as stream:
        for line in bounded_lines(stream):
            if line.data is None:
                log.warning(too_long(path, line))
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

LINE_LIMIT = 32 << 20  # bytes of one line held at once (an OTLP/JSON batch line, a links file header)
_SKIP_PIECE = 1 << 20  # an overlong line is read past this much at a time


class Line(NamedTuple):
    """One line of a file: its number (from 1), its bytes with the newline (None when it was longer
    than the limit and skipped) and how many bytes it took in the file."""

    number: int
    data: bytes | None
    size: int


def bounded_lines(stream: BinaryIO, limit: int = LINE_LIMIT, first_number: int = 1) -> Iterator[Line]:
    """The lines of ``stream`` (binary), none of more than ``limit`` bytes held: a longer one comes
    as ``Line(number, None, size)``. A last line without a newline comes as it is (the caller can
    tell a torn one by its missing ``b"\\n"``)."""
    readline = stream.readline
    number = first_number - 1
    while True:
        data = readline(limit + 1)
        if not data:
            return
        number += 1
        if len(data) <= limit or data[-1:] == b"\n":
            yield Line(number, data, len(data))
            continue
        size = len(data)
        del data  # (let go before reading on)
        while True:
            piece = readline(_SKIP_PIECE)
            size += len(piece)
            if not piece or piece[-1:] == b"\n":
                break
        yield Line(number, None, size)


def too_long(path: str | os.PathLike[str], line: Line, limit: int = LINE_LIMIT) -> str:
    """The one line that says a line was skipped for its length."""
    return f"{os.fspath(path)}: line {line.number} is {line.size:,} bytes, longer than the {_size(limit)} a line may be; skipped"


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of a file no larger than ``limit`` bytes; ``ValueError`` for a larger one, read no further."""
    with open(path, "rb") as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{os.fspath(path)} is larger than the {_size(limit)} it may be; not read")
    return data


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 and not count & ((1 << 20) - 1) else f"{count:,} bytes"
