"""Text (LRA): byte-level IMDb sentiment classification from the aclImdb release."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from linarena.data.base import TaskDataModule
from linarena.data.batching import pack_sequences
from linarena.data.errors import DataFormatError, DataNotFoundError, missing_data_error
from linarena.data.progress import progress
from linarena.data.sources import IMDB_URL, download
from linarena.data.spec import TaskSpec

IMDB_ARCHIVE = "aclImdb_v1.tar.gz"
IMDB_FOLDER = "aclImdb"
IMDB_SPLITS = ("train", "test")
LABELS = {"neg": 0, "pos": 1}
BYTE_VOCAB_SIZE = 257  # pad 0 + bytes 0-255 shifted by one
_REVIEW = re.compile(r"^aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$")


def _reviews_in_folder(folder: Path) -> Iterator[tuple[str, bytes]]:
    """(path relative to the folder's parent, content) of every train/test review file."""
    for split in IMDB_SPLITS:
        for label in LABELS:
            for path in (folder / split / label).glob("*.txt"):
                yield f"{IMDB_FOLDER}/{split}/{label}/{path.name}", path.read_bytes()


def _reviews_in_archive(archive: Path) -> Iterator[tuple[str, bytes]]:
    """Same as `_reviews_in_folder`, streamed from the tar.gz without extracting it."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                if member.isfile() and _REVIEW.match(member.name):
                    handle = tar.extractfile(member)
                    assert handle is not None  # regular files always have content
                    yield member.name, handle.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise DataFormatError(
            archive, None, f"cannot read the archive ({error}); delete it and download it again"
        ) from error


def read_imdb(source: Path, max_length: int) -> dict[str, tuple[list[np.ndarray], np.ndarray]]:
    """Reviews per split ("train", "test"), in path order: (uint8 byte arrays, labels (n,))."""
    reviews = _reviews_in_archive(source) if source.is_file() else _reviews_in_folder(source)
    by_split: dict[str, list[tuple[str, bytes]]] = {split: [] for split in IMDB_SPLITS}
    for name, content in progress(reviews, desc="IMDb reviews", unit="file"):
        if not content:
            if source.is_dir():  # `name` starts with the folder's own name, aclImdb/
                raise DataFormatError(source.parent / name, None, "the review is empty")
            raise DataFormatError(source, None, f"the review {name} in the archive is empty")
        by_split[name.split("/")[1]].append((name, content[:max_length]))
    result = {}
    for split, items in by_split.items():
        if not items:
            raise DataFormatError(source, None, f"no reviews found for the {split} split")
        items.sort()
        sequences = [np.frombuffer(content, dtype=np.uint8) for _, content in items]
        labels = np.array([LABELS[name.split("/")[2]] for name, _ in items], dtype=np.int64)
        result[split] = (sequences, labels)
    return result


class TextDataModule(TaskDataModule):
    """IMDb reviews as bytes (token = byte + 1), truncated to `max_length`; 2 classes.

    Reads `<data_dir>/aclImdb/` (extracted) or `<data_dir>/aclImdb_v1.tar.gz`, downloading the
    archive when both are absent and `download` is true. As in LRA, the test split also serves as
    the validation split.
    """

    token_shift = 1
    split_aliases = {"val": "test"}  # noqa: RUF012 - read-only class constant

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 4096,
        download: bool = True,
    ) -> None:
        spec = TaskSpec("text", "sequence", BYTE_VOCAB_SIZE, len(LABELS), max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        self.download = download

    def cache_config(self) -> dict[str, Any]:
        return {}

    def _present(self) -> Path | None:
        """The extracted folder or else the archive, when present."""
        folder, archive = self.data_dir / IMDB_FOLDER, self.data_dir / IMDB_ARCHIVE
        if all((folder / split).is_dir() for split in IMDB_SPLITS):
            return folder
        return archive if archive.is_file() else None

    def _missing(self, reason: str) -> DataNotFoundError:
        expected = [IMDB_ARCHIVE, f"{IMDB_FOLDER}/{{train,test}}/{{pos,neg}}/*.txt"]
        return missing_data_error(
            "text", expected, self.data_dir, [IMDB_URL], one_of=True, reason=reason
        )

    def check_sources(self) -> None:
        if self._present() is None and not self.download:
            raise self._missing("data.download=false, so no download was tried")

    def source_files(self) -> dict[str, Path]:
        folder = self.data_dir / IMDB_FOLDER
        if self._present() != folder:  # the archive, or the archive that will be downloaded
            return {IMDB_ARCHIVE: self.data_dir / IMDB_ARCHIVE}
        # The folders read, not train/unsup's 50,000 unlabelled reviews.
        return {f"{IMDB_FOLDER}/{split}/{label}": folder / split / label
                for split in IMDB_SPLITS for label in LABELS}

    def find_source(self) -> Path:
        """The extracted folder or the archive, downloading the archive if allowed."""
        present = self._present()
        if present is not None:
            return present
        self.check_sources()
        archive = self.data_dir / IMDB_ARCHIVE
        try:
            download(IMDB_URL, archive)
        except OSError as error:
            raise self._missing(f"automatic download failed: {error}") from error
        return archive

    def build(self) -> dict[str, torch.Tensor]:
        tensors = {}
        for split, (sequences, labels) in read_imdb(self.find_source(), self.max_length).items():
            packed = pack_sequences(sequences, torch.uint8)
            tensors |= {f"{split}/{key}": value for key, value in packed.items()}
            tensors[f"{split}/labels"] = torch.from_numpy(labels)
        return tensors
