"""Where a command may write: never over one of its inputs, and never over an existing file it did
not make unless told to (``--force``).

A file the package made is known by its first bytes: a page of ``gym-instrument`` (its title), or
OTLP/JSON lines of replayed spans (``gym.replayed``). An empty file holds nothing to lose. Example::

    refusal = output_refusal(Path("report.html"), inputs=files_read, force=False)
    if refusal:
        raise CommandError(refusal)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_HEAD_BYTES = 4096
_PAGE = (b"<!doctype html", b"<title>gym-instrument")
_REPLAYED = (b'{"resource', b'"gym.replayed"')


def made_by_gym_instrument(path: Path) -> bool:
    """Whether ``path`` starts as a file a ``gym-instrument`` command writes (a page, replayed spans)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(_HEAD_BYTES)
    except OSError:
        return False
    return any(head.lstrip().lower().startswith(start.lower()) and mark in head for start, mark in (_PAGE, _REPLAYED))


def output_refusal(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], force: bool, append: bool = False
) -> str | None:
    """Why a command must not write ``path`` (one line), or None: it is one of ``inputs`` (whatever
    ``force`` says), or an existing file with something in it that the package did not make and
    neither ``force`` nor ``append`` (which keeps what is there) allows to be replaced."""
    target = Path(path)
    try:
        info = target.stat()
    except OSError:
        return None  # nothing there (or nothing this command could read): it creates the file
    for source in inputs:
        try:
            if os.path.samefile(source, target):
                return f"{target} is one of this command's inputs; it is not written (name another file)"
        except OSError:
            continue
    if force or append or info.st_size == 0 or not target.is_file() or made_by_gym_instrument(target):
        return None
    return f"{target} exists and was not written by gym-instrument; give --force to replace it"
