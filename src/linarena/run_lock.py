"""One training process per run folder.

While a process trains (or resumes) in a run folder it holds an OS file lock on
``<folder>/.run.lock`` and describes itself in ``<folder>/.run_owner.json`` (pid, host, start
time, command). A second process that wants the folder is refused with that description. The
lock is released by the OS when its holder dies, even by ``kill -9``; the owner record it leaves
is then stale, and the next process takes the folder over with a note.

Only rank 0 takes the lock: the other DDP ranks (re-run by Lightning, or started by Slurm or
torchrun, with the same folder) belong to the same training. The ranks are read from the
variables those launchers set, so that this module loads without torch.

Hydra writes a job's ``.hydra/`` files before the job can take the lock, so a refused second
process has already overwritten them; the owner puts its own back when it releases the folder.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from linarena.errors import ResumeError
from linarena.files import write_bytes_atomic, write_text_atomic

LOCK_FILE = ".run.lock"
OWNER_FILE = ".run_owner.json"
HYDRA_DIR = ".hydra"
# Set (non-zero) in every process of a distributed training but the first one.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

log = logging.getLogger(__name__)


class RunFolderBusyError(ResumeError):
    """Another live process trains in the run folder."""


@dataclass(frozen=True)
class Owner:
    """Who trains in a run folder."""

    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def this_process(cls) -> Owner:
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return cls(os.getpid(), socket.gethostname(), now, " ".join(sys.argv))

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {self.started} ({self.command})"

    def alive(self) -> bool | None:
        """Whether the process still runs; None when it ran on another host (cannot tell)."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def read_owner(folder: Path) -> Owner | None:
    """The owner record in `folder`, or None when there is none (or it is unreadable)."""
    try:
        return Owner(**json.loads((folder / OWNER_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _busy_message(folder: Path, owner: Owner | None) -> str:
    who = owner.describe() if owner is not None else "another process (it is starting up)"
    kill = f"stop it (kill {owner.pid}) and resume it" if owner is not None else "stop it"
    return (
        f"The run folder {folder} is in use: {who} trains in it. Two trainings in one folder "
        f"would mix their checkpoints and summaries. Wait for it to finish, or {kill} later "
        f"with python train.py ckpt_path=last hydra.run.dir={folder}, or train in another "
        "folder (drop hydra.run.dir=... for a new one). Its .hydra/ files, which this attempt "
        "overwrote, are put back when it ends."
    )


def _snapshot(folder: Path) -> dict[Path, bytes]:
    hydra = folder / HYDRA_DIR
    return {p: p.read_bytes() for p in hydra.rglob("*") if p.is_file()} if hydra.is_dir() else {}


def _restore(folder: Path, snapshot: dict[Path, bytes]) -> None:
    """Put the .hydra/ files back as they were when the folder was taken (a refused process may
    have overwritten them, or added its own)."""
    for path, now in _snapshot(folder).items():
        if path not in snapshot:
            path.unlink(missing_ok=True)
        elif now != snapshot[path]:
            write_bytes_atomic(path, snapshot[path])
    for path, content in snapshot.items():
        if not path.is_file():
            write_bytes_atomic(path, content)


@contextmanager
def run_folder_lock(folder: Path) -> Iterator[None]:
    """Own `folder` for the duration of the block (rank 0 only; other ranks pass through).

    Raises RunFolderBusyError, naming the owner, when another live process holds it.
    """
    if any(os.environ.get(name, "0") != "0" for name in RANK_VARIABLES):
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_FILE)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunFolderBusyError(_busy_message(folder, read_owner(folder))) from None
    try:
        stale = read_owner(folder)
        if stale is not None:
            state = {False: "is no longer running", None: "ran on another host"}.get(
                stale.alive(), "no longer holds the folder"
            )
            log.warning(
                "Taking over the run folder %s: its owner record names %s, which %s (it ended "
                "without releasing the folder).", folder, stale.describe(), state
            )
        write_text_atomic(folder / OWNER_FILE, json.dumps(asdict(Owner.this_process())) + "\n")
        snapshot = _snapshot(folder)
        try:
            yield
        finally:
            _restore(folder, snapshot)
            (folder / OWNER_FILE).unlink(missing_ok=True)
    finally:
        lock.release()
