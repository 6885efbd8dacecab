"""Checkpoint writing that never leaves a truncated file behind, and says how much space a
checkpoint needed when the disk is full."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from linarena.errors import ResourceError
from linarena.files import atomic_path
from linarena.training.environment import os_error_message


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save to a temporary file in the checkpoint's folder, then os.replace.

    Lightning's own local save stages the file in the system temp folder and moves it, which is
    a copy (not atomic) when that folder is on another filesystem, as on many clusters. Remote
    paths (s3://, ...) keep Lightning's behaviour.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if "://" in str(path) or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        try:
            with atomic_path(path) as tmp, open(tmp, "wb") as file:
                # A file object, not a name: torch's own C++ writer reports a full disk as
                # "RuntimeError: [enforce fail at inline_container.cc]"; Python's write raises the
                # OSError, which torch then chains to its RuntimeError.
                torch.save(checkpoint, file)
        except (OSError, RuntimeError) as err:
            cause = machine_cause(err)
            if cause is None:
                raise
            cause.filename = cause.filename or str(path)
            raise ResourceError(os_error_message(cause, checkpoint_bytes(checkpoint))) from None


def machine_cause(err: BaseException) -> OSError | None:
    """The full-disk or over-quota OSError behind `err` (itself, or the error it was raised from
    or while handling), or None."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def checkpoint_bytes(checkpoint: Any) -> int:
    """The bytes of the tensors in a checkpoint (what torch.save writes, less a little)."""
    if isinstance(checkpoint, torch.Tensor):
        return checkpoint.nelement() * checkpoint.element_size()
    if isinstance(checkpoint, dict):
        return sum(checkpoint_bytes(value) for value in checkpoint.values())
    if isinstance(checkpoint, list | tuple):
        return sum(checkpoint_bytes(value) for value in checkpoint)
    return 0
