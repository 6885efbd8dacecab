"""The train.py processes of a study, and what a signal to the study does to them: SIGTERM or
SIGINT (Ctrl+C) is passed on to every run (train.py saves a checkpoint and stops); the study
waits for them (STOP_WAIT_S at most, then kills them), starts no other run, says what it stopped
and the command that resumes it, and exits with 128 + the signal's number (143, 130)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# How long a stopped study waits for its runs to save their checkpoints and exit before it
# kills them.
STOP_WAIT_S = 120.0
# The signals a study passes on to its runs; a hangup (the terminal closed) as a SIGTERM, since
# the runs are in sessions of their own.
FORWARDED = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT,
             signal.SIGHUP: signal.SIGTERM}


class Children:
    """The train.py processes of a study, each in a session of its own, so that a Ctrl+C in the
    terminal reaches the study alone, which passes it on once (a second SIGINT stops train.py
    at once, without a checkpoint)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.running: dict[subprocess.Popen, str] = {}
        # The name of the signal that stopped the study; no run starts after it.
        self.stopped_by: str | None = None
        self.interrupted: list[str] = []
        self.killed: list[str] = []

    def call(self, command: Sequence[str], label: str, **popen_args: object) -> int | None:
        """Run `command` (`label`: what it trains, for the messages) to its end; its exit
        code, or None when the study was stopped before it could start."""
        with self.lock:
            if self.stopped_by is not None:
                return None
            process = subprocess.Popen(command, start_new_session=True, **popen_args)
            self.running[process] = label
        try:
            return process.wait()
        finally:
            with self.lock:
                del self.running[process]

    def stop(self, signum: int) -> None:
        """Pass the signal on to every run (a study's signal handler); the first time, kill
        the runs still running STOP_WAIT_S later."""
        with self.lock:
            first = self.stopped_by is None
            if first:
                self.stopped_by = signal.Signals(signum).name
                self.interrupted = list(self.running.values())
            for process in self.running:
                process.send_signal(FORWARDED[signum])
        if first:
            timer = threading.Timer(STOP_WAIT_S, self.kill)
            timer.daemon = True
            timer.start()

    @contextmanager
    def passing_signals_on(self) -> Iterator[None]:
        """SIGTERM, SIGINT and SIGHUP call `stop` while in the block (from the main thread;
        elsewhere signals cannot be handled)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.signal(signum, lambda signum, _: self.stop(signum))
                    for signum in FORWARDED}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def kill(self) -> None:
        """Kill the runs that did not stop in time."""
        with self.lock:
            for process, label in self.running.items():
                process.kill()
                self.killed.append(label)

    def exit_if_stopped(self) -> None:
        """After a signal: say what was stopped and how to resume, then exit with 128 + the
        signal's number."""
        if self.stopped_by is None:
            return
        script = Path(sys.argv[0]).name
        runs = ", ".join(self.interrupted) or "none running"
        killed = (f"; killed after {STOP_WAIT_S:.0f} s without stopping: "
                  f"{', '.join(self.killed)}" if self.killed else "")
        print(f"{script}: stopped by {self.stopped_by}; the runs it interrupted ({runs}{killed}) "
              "start again from the beginning, and finished runs are kept. Resume with the "
              f"same command: {shlex.join(['python', *sys.argv])}", file=sys.stderr, flush=True)
        sys.exit(128 + signal.Signals[self.stopped_by].value)
