"""A profiler that a process of the whole-run benchmark starts itself (``whole_run.py --profile``).

py-spy cannot attach to a process on this machine, and NeMo Gym's servers are started by
``gym env start`` with no way to pass a profiler in. So ``whole_run.py --profile`` copies this file
into the NeMo Gym venv's site-packages with a ``.pth`` line that imports it at every interpreter's
start-up; it does nothing unless ``GYM_BENCH_PROFILE_DIR`` is set, and the benchmark removes both
files afterwards.

With the variable set, a process whose command line matches ``GYM_BENCH_PROFILE_MATCH``
(comma-separated substrings; default: NeMo Gym's servers, ``app.py``) polls the folder: when
``start`` appears it starts yappi on CPU time, every thread; when ``stop`` appears it stops and
writes ``<pid>.pstat`` (pstats format) and ``<pid>.json`` (its command line and folder, and
the garbage collector's collections and their CPU time per generation while profiling). A
process that exits first writes them at exit. Standard library and yappi only.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
from pathlib import Path

DIR_VAR = "GYM_BENCH_PROFILE_DIR"
MATCH_VAR = "GYM_BENCH_PROFILE_MATCH"
POLL_SECONDS = 0.1


def _cmdline() -> list[str]:
    try:
        return [part.decode(errors="replace") for part in Path("/proc/self/cmdline").read_bytes().split(b"\0") if part]
    except OSError:
        return []


class _Profile:
    def __init__(self, folder: Path, cmdline: list[str]) -> None:
        self.folder = folder
        self.cmdline = cmdline
        self.running = False
        self.done = False
        self.lock = threading.Lock()
        # Collections and their CPU time, per generation: yappi books a pause on whatever function runs then.
        self.gc_collections = [0, 0, 0]
        self.gc_seconds = [0.0, 0.0, 0.0]
        self._gc_started = 0.0

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if not self.running:
            return
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            generation = info.get("generation", 0)
            self.gc_collections[generation] += 1
            self.gc_seconds[generation] += time.thread_time() - self._gc_started

    def start(self) -> None:
        import yappi

        with self.lock:
            if self.running or self.done:
                return
            yappi.set_clock_type("cpu")
            yappi.start(builtins=False, profile_threads=True)
            gc.callbacks.append(self._gc)
            self.running = True

    def stop(self) -> None:
        import yappi

        with self.lock:
            if not self.running:
                return
            yappi.stop()
            gc.callbacks.remove(self._gc)
            self.running, self.done = False, True
            pid = os.getpid()
            yappi.get_func_stats().save(str(self.folder / f"{pid}.pstat"), type="pstat")
            meta = {
                "pid": pid,
                "cmdline": self.cmdline,
                "cwd": os.getcwd(),
                "gc_collections": self.gc_collections,
                "gc_seconds": self.gc_seconds,
                "objects_tracked": len(gc.get_objects()),
            }
            (self.folder / f"{pid}.json").write_text(json.dumps(meta))

    def watch(self) -> None:
        while not self.done:
            if not self.running and (self.folder / "start").exists():
                self.start()
            if self.running and (self.folder / "stop").exists():
                self.stop()
            time.sleep(POLL_SECONDS)


def install() -> None:
    folder = os.environ.get(DIR_VAR)
    if not folder:
        return
    cmdline = _cmdline()
    patterns = [p for p in os.environ.get(MATCH_VAR, "app.py").split(",") if p]
    text = " ".join(cmdline)
    if not cmdline or os.path.basename(cmdline[0]).startswith(("bash", "sh")) or not any(p in text for p in patterns):
        return
    profile = _Profile(Path(folder), cmdline)
    atexit.register(profile.stop)
    threading.Thread(target=profile.watch, name="gym-bench-profile", daemon=True).start()


install()
