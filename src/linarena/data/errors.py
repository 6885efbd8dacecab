"""Errors raised by the data package, with messages that say how to fix the problem."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from linarena.errors import DataError


class DataNotFoundError(DataError, FileNotFoundError):
    """The files a task needs are absent and could not be generated or downloaded."""


class DataFormatError(DataError, ValueError):
    """A data file does not have the expected format; the message names the file and line."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = Path(path)
        self.line = line


class DataConfigError(DataError, ValueError):
    """A data.* setting does not fit the data (e.g. more validation examples than exist), or a
    split came out empty; the message names the setting to change."""


class DataDirError(DataNotFoundError):
    """The data folder cannot hold the data: it is a file, or it is not writable."""


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
