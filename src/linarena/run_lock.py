"""One training process per run folder.

While a process trains (or resumes) in a run folder it holds an OS file lock on
``<folder>/.run.lock`` and describes itself in ``<folder>/.run_owner.json`` (pid, host, start
time, command). A second process that wants the folder is refused with that description. The
lock is released by the OS when its holder dies, even by ``kill -9``; the owner record it leaves
is then stale, and the next process takes the folder over with a note.

Only rank 0 takes the lock: the other DDP ranks (re-run by Lightning, or started by Slurm or
torchrun, with the same folder) belong to the same training. The ranks are read from the
variables those launchers set, so that this module loads without torch.

A folder holds one run: a new run (no ``ckpt_path``) in a folder that already holds one (its
summary, checkpoints, resume history or owner record, live or left by a killed process) is
refused before anything in it changes; ``ckpt_path=last`` is the way back in. Hydra writes a
job's ``.hydra/`` files before the job starts, so train.py sends a new run's files elsewhere
(:data:`REFUSED_HYDRA_SUBDIR`, removed on refusal) when :func:`existing_run` finds one there.
A refused *resume* of a busy folder has overwritten the owner's ``.hydra/resume/`` files; the
owner puts its own back when it releases the folder. The lock file itself is removed on release.
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

from linarena.commands import resume_command
from linarena.errors import ResumeError
from linarena.files import write_bytes_atomic, write_text_atomic

LOCK_FILE = ".run.lock"
OWNER_FILE = ".run_owner.json"
HYDRA_DIR = ".hydra"
# Where Hydra writes the files of a new run aimed at a folder that holds a run (then removed).
REFUSED_HYDRA_SUBDIR = ".hydra/refused-new-run"
# What a run leaves in its folder once it has trained: any of them means the folder is taken.
RUN_MARKERS = ("summary.json", "checkpoints", "resume_history.yaml", OWNER_FILE)
# Set (non-zero) in every process of a distributed training but the first one.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")

log = logging.getLogger(__name__)


class RunFolderBusyError(ResumeError):
    """Another live process trains in the run folder."""


class RunFolderTakenError(ResumeError):
    """A new run was aimed at a folder that already holds a run."""


def is_other_rank() -> bool:
    """Whether this process is a DDP rank other than the first (it shares rank 0's folder)."""
    return any(os.environ.get(name, "0") != "0" for name in RANK_VARIABLES)


def existing_run(folder: Path) -> list[str]:
    """The marks of a run already in `folder` (e.g. ["summary.json", "checkpoints/last.ckpt"]);
    [] when it holds none (absent, empty, or only files a failed start leaves)."""
    found = []
    for name in RUN_MARKERS:
        path = folder / name
        if path.is_dir():
            found += sorted(str(p.relative_to(folder)) for p in path.iterdir())[:2]
        elif path.exists():
            found.append(name)
    return found


def _taken_message(folder: Path, found: list[str]) -> str:
    return (
        f"The folder {folder} already holds a run ({', '.join(found)}); a new run there would "
        "overwrite its summary and checkpoints, so nothing was changed. To continue that run: "
        f"{resume_command(folder)} (with a larger "
        "trainer.max_steps if it finished). To train a new run, drop hydra.run.dir=... (each "
        "run gets a new folder) or point it at an empty folder."
    )


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
        f"with {resume_command(folder)}, or train in another "
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
def run_folder_lock(folder: Path, new_run: bool = False) -> Iterator[None]:
    """Own `folder` for the duration of the block (rank 0 only; other ranks pass through).

    Raises RunFolderBusyError, naming the owner, when another live process holds it, and
    RunFolderTakenError for a `new_run` (no checkpoint to resume) in a folder holding a run.
    """
    if is_other_rank():
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    lock_path = folder / LOCK_FILE
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunFolderBusyError(_busy_message(folder, read_owner(folder))) from None
    same = _same_file(lock_path, lock)
    try:
        if same is False:
            # The previous owner removed the lock file after we opened it: we hold a lock on a
            # file nobody else sees, while a third process may hold the new one.
            raise RunFolderBusyError(_busy_message(folder, read_owner(folder)))
        found = existing_run(folder) if new_run else []
        if found:
            raise RunFolderTakenError(_taken_message(folder, found))
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
        # Removed while still held, so no process can lock it after our release and think it
        # owns the folder: one that opened it before sees it gone (_same_file) and backs off.
        # Where that cannot be checked the file stays, as harmless as before.
        if same:
            lock_path.unlink(missing_ok=True)
        lock.release()


def _same_file(path: Path, lock: FileLock) -> bool | None:
    """Whether the lock we hold is on the file now at `path`; None where that cannot be told
    (no inode numbers, or a filelock without the descriptor)."""
    descriptor = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    if descriptor is None or os.name != "posix":
        return None
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False
