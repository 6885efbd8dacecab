"""Checkpoint writing that never leaves a truncated file behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from linarena.files import atomic_path


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
        with atomic_path(path) as tmp:
            torch.save(checkpoint, tmp)
