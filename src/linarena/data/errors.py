"""Errors raised by the data package, with messages that say how to fix the problem.

Every one derives from `DataError`, itself a `linarena.errors.LinarenaError`, so an entry point
catches them all with one clause; each also keeps the built-in base it always had
(FileNotFoundError, ValueError) for callers that catch those.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Sequence
from pathlib import Path

from linarena.errors import DataError
from linarena.system import human_bytes

# Characters of a file's content quoted in a message, at most.
EXCERPT_CHARS = 60


class DataNotFoundError(DataError, FileNotFoundError):
    """The files a task needs are absent and could not be generated or downloaded."""


class DataFormatError(DataError, ValueError):
    """A data file does not have the expected format; the message names the file and line."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = Path(path)
        self.line = line
        self.problem = problem


class DataConfigError(DataError, ValueError):
    """A data.* setting does not fit the data (e.g. more validation examples than exist), or a
    split came out empty; the message names the setting to change."""


class DataDirError(DataNotFoundError):
    """The data folder cannot hold the data: it is a file, not writable, or full."""


class CacheWriteError(OSError):
    """An OSError met writing the data cache file `cache`: the failure's errno, strerror and
    filename (None for a failed write, which names no file)."""

    def __init__(self, error: OSError, cache: Path) -> None:
        super().__init__(error.errno, error.strerror, error.filename)
        self.cache = cache


# OS errors met while writing the data that the data folder or the machine, not the code, causes.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DATA_DIR_ERRNOS = (
    *FULL_DISK_ERRNOS, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST,
    errno.EISDIR, errno.EFBIG,
)


def data_dir_error(error: OSError, task: str, data_dir: Path) -> DataDirError:
    """One paragraph for an OSError of DATA_DIR_ERRNOS met while building the data of
    data=`task` under `data_dir`: which folder, what is wrong with it, what to do.

    The folder is the one of the file the error names (error.filename), else `data_dir`; a full
    disk is reported with the free space of that folder's disk (of its nearest existing
    parent), not of the working directory's. A CacheWriteError names its cache file too.
    """
    cache = error.cache.absolute() if isinstance(error, CacheWriteError) else None
    path = Path(error.filename).absolute() if error.filename else data_dir.absolute()
    folder = path if path.is_dir() else path.parent
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    elsewhere = "set paths.data_dir (or LINARENA_DATA_DIR) to another, writable folder."
    if error.errno in FULL_DISK_ERRNOS:
        free = human_bytes(shutil.disk_usage(existing).free)
        writing = "" if cache is None else f" writing its cache file {cache}"
        return DataDirError(
            f"Cannot write the data of data={task} in {folder}: no space left on the device (or "
            f"over quota){writing}, {free} free on the disk of {existing}. Free some space "
            f"there, or {elsewhere}"
        )
    if error.errno == errno.EFBIG:
        return DataDirError(
            f"Cannot write {cache or path} for data={task}: the file would exceed this "
            "process's file-size limit (ulimit -f). Raise the limit (ulimit -f unlimited in the "
            "shell that starts the run) and run again."
        )
    if error.errno == errno.EISDIR:
        return DataDirError(
            f"{cache or path} is a folder where data={task} needs a file. Remove that folder, "
            f"or {elsewhere}"
        )
    if error.errno == errno.EROFS:
        return DataDirError(
            f"Cannot write the data of data={task} in {folder}: it is on a read-only file "
            f"system. Remount it writable, or {elsewhere}"
        )
    if error.errno in (errno.EACCES, errno.EPERM):
        return DataDirError(
            f"Permission denied for {path} while building the data of data={task}. Make "
            f"{folder} readable and writable for this user, or {elsewhere}"
        )
    return DataDirError(  # ENOTDIR, EEXIST
        f"Cannot write the data of data={task} in {folder}: a file stands where a folder is "
        f"needed ({path}). Move it away, or {elsewhere}"
    )


def in_generated_folder(error: DataFormatError, folder: Path) -> DataFormatError:
    """`error`, raised for a file that linarena generated under `folder`, with the fix. Generated
    files are written atomically, so a damaged one was changed afterwards (a full disk, a copy
    cut short): generating it again is the remedy."""
    return DataFormatError(
        error.path,
        error.line,
        f"{error.problem} This file was generated by linarena: delete the folder "
        f"{folder.resolve()} and run again to generate it anew.",
    )


def excerpt(path: Path | str, text: str) -> str:
    """`text`, read from the file at `path`, quoted (and cut) for an error message.

    A file that is a link into another folder may be any file on the machine (a key, a
    password file), so its content is never shown; the message says where the link leads.
    """
    path = Path(path)
    real = path.resolve()
    if real.parent != path.parent.resolve():
        return f"(content not shown: {path} is a link to {real})"
    if len(text) > EXCERPT_CHARS:
        return f"{text[:EXCERPT_CHARS]!r}..."
    return repr(text)


def missing_data_error(
    task: str,
    expected: Sequence[str],
    data_dir: Path,
    urls: Sequence[str],
    reason: str | None = None,
    one_of: bool = False,
    hint: str | None = None,
) -> DataNotFoundError:
    """Build the error for absent data.

    Args:
        task: the `data=` config name, e.g. "text".
        expected: paths relative to `data_dir`: all needed, or any one of them with `one_of`.
        data_dir: the data folder (made absolute in the message).
        urls: where to get the files.
        reason: why the data could not be downloaded or generated, if that was tried.
        hint: an extra line, e.g. how to unpack an archive.
    """
    root = Path(data_dir).resolve()
    header = "one of" if one_of else "these files"
    lines = [f"Data for data={task} not found. Expected {header}:"]
    lines += [f"  {root / item}" for item in expected]
    lines.append(f"Put it in {root} (data.data_dir, set from paths.data_dir), getting it from:")
    lines += [f"  {url}" for url in urls]
    if hint:
        lines.append(hint)
    lines.append(f"Then run: python scripts/prepare_data.py data={task}")
    if reason:
        lines.append(f"({reason})")
    return DataNotFoundError("\n".join(lines))
