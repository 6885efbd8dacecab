"""The one place for writing files safely: atomic writes and build locks.

Every file the project writes for later reading (checkpoints, caches, summaries, generated data,
downloads, benchmark CSVs, plots) goes through ``write_atomic`` or ``atomic_path``: a reader sees
the old file or the new one, never half of one, even if the writer is killed with ``kill -9``.
Builds that several jobs may start at once (the first jobs of a sweep) run under ``build_lock``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from filelock import FileLock

TEMP_SUFFIX = ".tmp"


def _temp_name(path: Path) -> Path:
    # Unique per writer (pid + random), beside the target so that os.replace is atomic.
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed to ``path``.

    For writers that want a file name (``torch.save``, ``PIL.Image.save``). The temporary file
    is created with plain ``open`` semantics, so it gets the usual permissions (umask), unlike
    ``tempfile``'s private 0600 files: other users of a shared data folder can read the result.
    On any error, or on KeyboardInterrupt, the temporary file is removed and ``path`` is left
    as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync it, rename it to ``path``."""
    with (
        atomic_path(path) as tmp,
        open(tmp, "wb" if binary else "w", newline=None if binary else "") as file,
    ):
        write(file)
        file.flush()
        os.fsync(file.fileno())


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    write_atomic(path, lambda file: file.write(text))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    write_atomic(path, lambda file: file.write(data), binary=True)


def remove_stale_temps(folder: str | Path, name: str | None = None) -> int:
    """Delete temporary files left in ``folder`` (not below it) by writers that were killed.

    Call it only while holding the ``build_lock`` of everything written in ``folder``, or with
    ``name`` (only the temp files of ``folder/name``) while holding that file's lock: a temp
    file then belongs to no live writer. Returns the number of files removed.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    removed = 0
    for tmp in folder.glob(f".{name}.*{TEMP_SUFFIX}" if name else f".*{TEMP_SUFFIX}"):
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


@contextmanager
def build_lock(target: str | Path, timeout: float = -1) -> Iterator[None]:
    """Hold an inter-process lock for building ``target`` (a file or a folder).

    The lock file is ``.<name>.lock`` beside ``target``. A second job that wants the same build
    waits here until the first one finishes, then finds the result already complete. The lock
    is an OS file lock, so a killed holder releases it at once. ``timeout`` -1 waits forever.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.with_name(f".{target.name}.lock")), timeout=timeout):
        yield
