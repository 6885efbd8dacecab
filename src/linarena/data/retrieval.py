"""Retrieval (LRA): do two ACL Anthology Network papers cite each other? Byte-level documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from linarena.data.base import SPLITS, TaskDataModule
from linarena.data.batching import pack_sequences
from linarena.data.errors import DataFormatError, excerpt, missing_data_error
from linarena.data.progress import progress
from linarena.data.sources import LRA_RELEASE_URL, lra_release_hint, lra_release_path
from linarena.data.spec import TaskSpec
from linarena.data.text import BYTE_VOCAB_SIZE

# File suffix per split: the release calls the validation split "eval".
AAN_FILES = {"train": "train", "val": "eval", "test": "test"}
AAN_FOLDER = "tsv_data"


def aan_file_name(split: str) -> str:
    return f"new_aan_pairs.{AAN_FILES[split]}.tsv"


def read_aan_tsv(
    path: Path, max_length: int
) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Parse `label id1 id2 text1 text2` lines (tab-separated, no header, label like "1.0").

    Returns the two documents' bytes (uint8 arrays, each truncated to `max_length`) and the
    labels (int64 (n,)).
    """
    first, second, labels = [], [], []
    with open(path, "rb") as handle:
        lines = progress(handle, desc=path.name, unit="line")
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue  # a trailing blank line is harmless
            fields = line.rstrip(b"\r\n").split(b"\t")
            if len(fields) != 5:
                raise DataFormatError(
                    path,
                    line_number,
                    "expected 5 tab-separated fields (label id1 id2 text1 text2), "
                    f"got {len(fields)}",
                )
            try:
                label = float(fields[0])
            except ValueError:
                label = -1.0
            if label not in (0.0, 1.0):
                raise DataFormatError(
                    path,
                    line_number,
                    "label must be 0 or 1 (e.g. '1.0'), got "
                    + excerpt(path, fields[0].decode("utf-8", "replace")),
                )
            first.append(np.frombuffer(fields[3][:max_length], dtype=np.uint8))
            second.append(np.frombuffer(fields[4][:max_length], dtype=np.uint8))
            labels.append(int(label))
    if not labels:
        raise DataFormatError(path, None, "the file has no examples")
    return first, second, np.asarray(labels, dtype=np.int64)


class RetrievalDataModule(TaskDataModule):
    """AAN document pairs as bytes (token = byte + 1), each truncated to `max_length`; 2 classes.

    Task "pair": batches hold tokens and mask of shape (B, 2, L). Reads
    `<data_dir>/lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv` (the LRA release).
    """

    token_shift = 1

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 4000,
    ) -> None:
        spec = TaskSpec("retrieval", "pair", BYTE_VOCAB_SIZE, 2, max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)

    def cache_config(self) -> dict[str, Any]:
        return {}

    def check_sources(self) -> None:
        self.release_folder()

    def source_files(self) -> dict[str, Path]:
        folder = lra_release_path(self.data_dir, AAN_FOLDER)
        names = [aan_file_name(split) for split in SPLITS]
        return {} if folder is None else {name: folder / name for name in names}

    def release_folder(self) -> Path:
        """The release folder holding the three AAN files; DataNotFoundError naming them when
        one is absent."""
        folder = lra_release_path(self.data_dir, AAN_FOLDER)
        if folder is None or not all((folder / aan_file_name(s)).is_file() for s in SPLITS):
            raise missing_data_error(
                "retrieval",
                [f"lra_release/{AAN_FOLDER}/{aan_file_name(split)}" for split in SPLITS],
                self.data_dir,
                [LRA_RELEASE_URL],
                hint=lra_release_hint(self.data_dir),
            )
        return folder

    def build(self) -> dict[str, torch.Tensor]:
        folder = self.release_folder()
        tensors = {}
        for split in SPLITS:
            first, second, labels = read_aan_tsv(folder / aan_file_name(split), self.max_length)
            for document, sequences in (("first", first), ("second", second)):
                packed = pack_sequences(sequences, torch.uint8)
                tensors |= {f"{split}/{document}/{key}": value for key, value in packed.items()}
            tensors[f"{split}/labels"] = torch.from_numpy(labels)
        return tensors
