"""Progress of the long data steps (generation, reading, downloads).

In a terminal, a tqdm bar. Anywhere else (a log file, Slurm, nohup, a pipe) a bar would fill the
file with carriage-return frames, so a plain log line is written every `INTERVAL_S` seconds and
one at the end instead, as training/progress.py does for the training loop.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any

from tqdm.auto import tqdm

log = logging.getLogger(__name__)

# Seconds between two plain progress lines.
INTERVAL_S = 30.0


def progress(
    iterable: Iterable[Any] | None = None,
    *,
    desc: str,
    unit: str,
    total: int | None = None,
    disable: bool = False,
) -> Any:
    """A tqdm bar on a terminal, else a `LoggedProgress`; both iterate over `iterable`, take
    `update(n)` and work as context managers. `total` defaults to len(iterable) when it has one."""
    if disable or sys.stderr.isatty():
        scale = unit == "B"
        return tqdm(iterable, desc=desc, unit=unit, total=total, unit_scale=scale, disable=disable)
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    return LoggedProgress(iterable, desc, unit, total)


class LoggedProgress:
    """Counts items and logs `desc: done/total unit (percent), elapsed` every INTERVAL_S
    seconds and when finished (at the end of the iteration, or on leaving its `with` block
    without an error)."""

    def __init__(
        self, iterable: Iterable[Any] | None, desc: str, unit: str, total: int | None
    ) -> None:
        self.iterable, self.desc, self.unit, self.total = iterable, desc, unit, total
        self.count = 0
        self.started = self.last_line = time.monotonic()
        self.closed = False
        self.logged = -1  # the count of the last line written

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("LoggedProgress was made without an iterable")
        for item in self.iterable:
            yield item
            self.update()
        self.close()

    def update(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if now - self.last_line >= INTERVAL_S:
            self.last_line = now
            self._log()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.logged != self.count:
                self._log()

    def __enter__(self) -> LoggedProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()

    def _log(self) -> None:
        self.logged = self.count
        scale, unit = (1e6, "MB") if self.unit == "B" else (1, self.unit)
        done = f"{self.count / scale:,.{1 if scale > 1 else 0}f}"
        if self.total:
            total = f"{self.total / scale:,.{1 if scale > 1 else 0}f}"
            done = f"{done}/{total} {unit} ({100 * self.count / self.total:.0f}%)"
        else:
            done = f"{done} {unit}"
        log.info("%s: %s, %.0f s", self.desc, done, time.monotonic() - self.started)
