"""The garbage collector's pauses, counted in every process of a timed whole run (``whole_run.py``).

A full (generation 2) collection of a NeMo Gym process's heap takes a fifth of a second or more on
this machine, and whether one falls inside a collection's window is a matter of chance: one pause
more or less in one process moves that collection's CPU by a percent. So ``whole_run.py`` copies this
file into the NeMo Gym venv's site-packages with a ``.pth`` line that imports it at every
interpreter's start-up (and removes both afterwards); it does nothing unless ``GYM_BENCH_GC_DIR``
is set, which every configuration's processes get alike.

With the variable set, ``gc.callbacks`` counts each collection and the CPU time of the thread that
ran it, per generation, and a daemon thread rewrites ``<pid>-<start time>.json`` in that folder
(``{"collections": [g0, g1, g2], "cpu_ns": [g0, g1, g2]}``, running totals) within a quarter of a
second of a change, and at exit. The start time is /proc's (clock ticks since boot), as the
benchmark keys processes. A forked child starts its own totals and its own file. Standard library only.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
from pathlib import Path

DIR_VAR = "GYM_BENCH_GC_DIR"
WRITE_SECONDS = 0.25


def _start_time() -> int:
    """This process's start time as /proc/<pid>/stat gives it (field 22), the benchmark's key with the pid."""
    stat = Path("/proc/self/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


class _Pauses:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.collections = [0, 0, 0]
        self.cpu_ns = [0, 0, 0]
        self.started = 0
        self.written: tuple[list[int], list[int]] | None = None
        self.path = self.folder / f"{os.getpid()}-{_start_time()}.json"

    def callback(self, phase: str, info: dict[str, int]) -> None:
        # One collection at a time in a process (the GIL), run by the thread that triggered it.
        if phase == "start":
            self.started = time.thread_time_ns()
            return
        generation = info.get("generation", 0)
        self.collections[generation] += 1
        self.cpu_ns[generation] += time.thread_time_ns() - self.started

    def write(self) -> None:
        with self.lock:
            state = (list(self.collections), list(self.cpu_ns))
            if state == self.written:
                return
            temporary = self.path.with_name("." + self.path.name)
            temporary.write_text(json.dumps({"collections": state[0], "cpu_ns": state[1]}))
            os.replace(temporary, self.path)
            self.written = state

    def write_quietly(self) -> None:
        try:
            self.write()
        except OSError:
            pass  # the folder is gone: the run is over

    def watch(self) -> None:
        while True:
            time.sleep(WRITE_SECONDS)
            try:
                self.write()
            except OSError:
                return  # the folder is gone: the run is over

    def start_watching(self) -> None:
        threading.Thread(target=self.watch, name="gym-bench-gc", daemon=True).start()

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        self.reset()
        self.start_watching()


def install() -> None:
    folder = os.environ.get(DIR_VAR)
    if not folder or not os.path.isdir(folder):
        return
    pauses = _Pauses(Path(folder))
    gc.callbacks.append(pauses.callback)
    atexit.register(pauses.write_quietly)
    os.register_at_fork(after_in_child=pauses.after_fork)
    pauses.start_watching()


install()
