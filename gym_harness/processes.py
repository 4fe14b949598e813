"""The processes of an end-to-end run: ports, start, wait, stop.

Every process the run starts leads its own session and carries a marker variable in its
environment, so that stopping finds all of them: the session catches Ray's workers (which start
their own process groups inside it), the marker catches anything that left its session.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# Every process this run starts carries this variable, so cleanup can find stragglers exactly.
RUN_MARKER_VAR = "GYM_INSTRUMENT_E2E_RUN"


class E2EFailure(Exception):
    """A step failed; the message says which and where its log is."""


def log(message: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)


def tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"(no {path})"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(f"    {line}" for line in text[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_stat(text: str) -> tuple[int, int, int]:
    """(own CPU ticks, reaped children's CPU ticks, start time) from a /proc/<pid>/stat line."""
    fields = text.rsplit(")", 1)[1].split()
    # After the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice threads itrealvalue starttime ...
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return utime + stime, cutime + cstime, int(fields[19])


def parent_pid(text: str) -> int:
    """The parent's pid from a /proc/<pid>/stat line."""
    return int(text.rsplit(")", 1)[1].split()[1])


def stopped(pid: int) -> bool:
    """Whether every thread of a process is stopped, or has ended: SIGSTOP takes effect as each thread next
    runs, not when kill() returns."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True  # the process has ended
    for task in tasks:
        try:
            state = process_state((task / "stat").read_text())
        except OSError:
            continue  # this thread ended meanwhile
        if state not in "TtZX":
            return False
    return True


def process_state(text: str) -> str:
    """The state letter (R, S, D, T, Z, ...) from a /proc/<pid>/stat line."""
    return text.rsplit(")", 1)[1].split()[0]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _default_sigint() -> None:
    # A child of a non-interactive shell may inherit SIGINT as ignored; NeMo Gym's shutdown
    # and uvicorn's graceful stop both rely on it, so restore the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Processes:
    """The processes this run started, each as the leader of its own session."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, command: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log(f"starting {name}: {' '.join(command)}")
        out = log_path.open("ab")
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env or self.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        out.close()
        self.started.append((name, process))
        return process

    def interrupt(self, process: subprocess.Popen, timeout: float) -> None:
        """Ctrl-C to the whole process group, as a terminal would; kill what is left after `timeout`."""
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill_session(process.pid)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    @staticmethod
    def _session_members(session_id: int) -> list[int]:
        members = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # Fields after the parenthesised command: state ppid pgrp session ...
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 3 and int(fields[3]) == session_id and fields[0] != "Z":
                members.append(int(entry.name))
        return members

    def kill_session(self, session_id: int) -> None:
        # Ray's workers start their own process groups inside the session; the session catches them.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            members = self._session_members(session_id)
            if not members:
                return
            for pid in members:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self._session_members(session_id):
                time.sleep(0.2)

    @staticmethod
    def marked(marker: str) -> list[int]:
        """The live processes whose environment carries this run's marker."""
        needle = f"{RUN_MARKER_VAR}={marker}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()  # empty for a zombie
            except OSError:
                continue
            if needle in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def stop_all(self, marker: str) -> list[int]:
        """Stop every process this run started; return the pids still alive afterwards (none, normally)."""
        for _, process in reversed(self.started):
            if process.poll() is None:
                self.interrupt(process, timeout=5)
            else:
                self.kill_session(process.pid)
        # A process that left its session is found by the marker in its environment.
        stragglers = self.marked(marker)
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if stragglers:
            log(f"killed {len(stragglers)} leftover process(es) of this run: {stragglers}")
            time.sleep(1)
        return self.marked(marker)


def wait_for(
    description: str,
    condition: Callable[[], bool],
    timeout: float,
    alive: Callable[[], str | None] | None = None,
    interval: float = 0.5,
) -> None:
    """Poll `condition` until true; fail after `timeout` or as soon as `alive()` reports a death."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if alive is not None:
            death = alive()
            if death:
                raise E2EFailure(f"while waiting for {description}: {death}")
        if time.monotonic() > deadline:
            raise E2EFailure(f"timed out after {timeout:.0f}s waiting for {description}")
        time.sleep(interval)


def await_arrival(description: str, arrived: Callable[[], bool], timeout: float, notes: list[str]) -> None:
    """Wait until everything expected has ``arrived()``; when it does not, note why and go on (the checks
    that follow say precisely what is missing). Then one second more: anything late (a duplicate)
    would arrive now."""
    try:
        wait_for(description, arrived, timeout, interval=0.5)
    except E2EFailure as error:
        notes.append(str(error))
    time.sleep(1)


def exited(process: subprocess.Popen, name: str, log_path: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        if process.poll() is None:
            return None
        return f"{name} exited with code {process.returncode}; log: {log_path}\n{tail(log_path)}"

    return check


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind so that every started process is stopped."""


def _stop_on_signal(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def run_main(run: Callable[[], int], logs: Callable[[], Path] | None = None) -> int:
    """A runner's exit code: ``run()``'s; 1 when an :class:`E2EFailure` says what failed (and where
    ``logs()`` says the logs are, asked then: a run may choose its folder); 130 when interrupted
    (Ctrl-C, SIGTERM, SIGHUP), everything started being stopped on the way out."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    try:
        return run()
    except E2EFailure as error:
        log(f"FAILED: {error}")
        if logs is not None:
            log(f"logs are in {logs()}")
        return 1
    except (KeyboardInterrupt, Stopped) as stop:
        log(f"interrupted ({stop or 'SIGINT'}); everything this run started has been stopped")
        return 130
