"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(path: Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it to ``path``.

    The temporary file is opened with plain ``open`` so that it gets the usual permissions
    (umask), unlike ``tempfile``'s private 0600 files.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb" if binary else "w", newline=None if binary else "") as file:
            write(file)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
