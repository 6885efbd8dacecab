"""Image (LRA): CIFAR-10 in grey levels, one pixel per token, from the binary release."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from linarena.data.base import TaskDataModule
from linarena.data.batching import pack_rows
from linarena.data.errors import (
    DataConfigError,
    DataFormatError,
    DataNotFoundError,
    missing_data_error,
)
from linarena.data.sources import CIFAR10_URL, download
from linarena.data.spec import TaskSpec
from linarena.data.text import BYTE_VOCAB_SIZE

CIFAR_ARCHIVE = "cifar-10-binary.tar.gz"
CIFAR_FOLDER = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{k}.bin" for k in range(1, 6))
TEST_FILES = ("test_batch.bin",)
IMAGE_SIDE = 32
RECORD_BYTES = 1 + 3 * IMAGE_SIDE * IMAGE_SIDE  # label byte, then R, G and B planes (row-major)
NUM_CLASSES = 10


def parse_cifar_records(data: bytes, path: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """Split a CIFAR-10 binary file into RGB images (n, 3, 32, 32) uint8 and labels (n,) int64."""
    if len(data) == 0 or len(data) % RECORD_BYTES:
        raise DataFormatError(
            path,
            None,
            f"size {len(data)} bytes is not a positive multiple of {RECORD_BYTES} "
            "(1 label byte + 3072 pixel bytes per image)",
        )
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise DataFormatError(
            path, None, f"record {bad[0]} has label {labels[bad[0]]}, expected 0-9"
        )
    images = records[:, 1:].reshape(-1, 3, IMAGE_SIDE, IMAGE_SIDE)
    return images, labels


# tf.image.rgb_to_grayscale's weights (ITU-R BT.601 luma, rounded as TensorFlow has them).
TF_GREY_WEIGHTS = (0.2989, 0.5870, 0.1140)


def to_grayscale(images: np.ndarray) -> np.ndarray:
    """Grey levels as the LRA pipeline computes them: tf.image.rgb_to_grayscale on uint8, then
    tf.cast to int32. TensorFlow converts to float32 in [0, 1] (x * (1/255)), takes the weighted
    sum with TF_GREY_WEIGHTS in float32 and converts back by truncating x * 255.5 (its
    convert_image_dtype). Reimplemented here in float32 from that definition.

    images: uint8 (n, 3, H, W). Returns uint8 (n, H * W), pixels in row-major order.
    """
    unit = images.astype(np.float32) * np.float32(1.0 / 255.0)
    r, g, b = (unit[:, channel] for channel in range(3))
    w_r, w_g, w_b = (np.float32(w) for w in TF_GREY_WEIGHTS)
    grey = r * w_r + g * w_g + b * w_b
    return (grey * np.float32(255.5)).astype(np.uint8).reshape(len(images), -1)


class ImageDataModule(TaskDataModule):
    """CIFAR-10 as 1024 grey pixel tokens; 10 classes.

    Tokens: pixel + 1 (vocabulary 257, every pixel real), or with `zero_pixel_is_padding` the
    pixel itself with black pixels (0) masked as padding (vocabulary 256), as the LRA code does.

    Reads `<data_dir>/cifar-10-batches-bin/` or `<data_dir>/cifar-10-binary.tar.gz` (the binary
    version; downloaded when absent and `download` is true). The 50,000 training images are split
    into `num_val` validation images and the rest for training, by a permutation drawn from `seed`;
    the 10,000 test images are the test split.
    """

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = IMAGE_SIDE * IMAGE_SIDE,
        num_val: int = 5_000,
        download: bool = True,
        zero_pixel_is_padding: bool = False,
    ) -> None:
        if max_length != IMAGE_SIDE * IMAGE_SIDE:
            raise DataConfigError(
                f"data.max_length must be {IMAGE_SIDE**2} for CIFAR-10 (32 x 32 "
                f"pixels), got {max_length}"
            )
        # token = pixel, so black pixels get the padding id 0; else pixel + 1, all real.
        self.token_shift = 0 if zero_pixel_is_padding else 1
        vocab_size = BYTE_VOCAB_SIZE - 1 + self.token_shift
        spec = TaskSpec("image", "sequence", vocab_size, NUM_CLASSES, max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        self.num_val = num_val
        self.download = download

    def cache_config(self) -> dict[str, Any]:
        return {"seed": self.seed, "num_val": self.num_val, "grey": "tensorflow"}

    def source_files(self) -> dict[str, Path]:
        folder = self.data_dir / CIFAR_FOLDER
        if self._folder_is_complete():
            return {name: folder / name for name in TRAIN_FILES + TEST_FILES}
        return {CIFAR_ARCHIVE: self.data_dir / CIFAR_ARCHIVE}  # present or to be downloaded

    def _folder_is_complete(self) -> bool:
        folder = self.data_dir / CIFAR_FOLDER
        return all((folder / name).is_file() for name in TRAIN_FILES + TEST_FILES)

    def _missing(self, reason: str) -> DataNotFoundError:
        expected = [CIFAR_ARCHIVE, *(f"{CIFAR_FOLDER}/{name}" for name in TRAIN_FILES + TEST_FILES)]
        return missing_data_error(
            "image",
            expected,
            self.data_dir,
            [CIFAR10_URL],
            reason=reason,
            hint=f"({CIFAR_ARCHIVE} alone, or the six files of {CIFAR_FOLDER}/)",
        )

    def check_sources(self) -> None:
        present = self._folder_is_complete() or (self.data_dir / CIFAR_ARCHIVE).is_file()
        if not present and not self.download:
            raise self._missing("data.download=false, so no download was tried")

    def read_files(self) -> dict[str, tuple[str, bytes]]:
        """(where, content) of the six binary batch files by file name, downloading if allowed;
        `where` names the file for error messages: its path, or the archive and the member."""
        names = TRAIN_FILES + TEST_FILES
        folder, archive = self.data_dir / CIFAR_FOLDER, self.data_dir / CIFAR_ARCHIVE
        if self._folder_is_complete():
            return {name: (str(folder / name), (folder / name).read_bytes()) for name in names}
        self.check_sources()
        if not archive.is_file():
            try:
                download(CIFAR10_URL, archive)
            except OSError as error:
                raise self._missing(f"automatic download failed: {error}") from error
        return self._read_archive(archive, names)

    @staticmethod
    def _read_archive(archive: Path, names: tuple[str, ...]) -> dict[str, tuple[str, bytes]]:
        contents = {}
        try:
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    name = Path(member.name).name
                    if member.isfile() and name in names:
                        handle = tar.extractfile(member)
                        assert handle is not None  # regular files always have content
                        contents[name] = (f"{archive} (member {member.name})", handle.read())
        except (tarfile.TarError, EOFError, OSError) as error:
            raise DataFormatError(
                archive, None, f"cannot read the archive ({error}); delete it and download it again"
            ) from error
        missing = [name for name in names if name not in contents]
        if missing:
            raise DataFormatError(archive, None, f"the archive lacks {', '.join(missing)}")
        return contents

    def build(self) -> dict[str, torch.Tensor]:
        contents = self.read_files()
        parsed = {name: parse_cifar_records(data, where)
                  for name, (where, data) in contents.items()}
        train_images = np.concatenate([parsed[name][0] for name in TRAIN_FILES])
        train_labels = np.concatenate([parsed[name][1] for name in TRAIN_FILES])
        if not 0 < self.num_val < len(train_labels):
            raise DataConfigError(
                f"data.num_val={self.num_val}, but CIFAR-10 has {len(train_labels)} training "
                f"images: set data.num_val between 1 and {len(train_labels) - 1}"
            )
        order = np.random.default_rng(self.seed).permutation(len(train_labels))
        splits = {
            "train": np.sort(order[self.num_val :]),
            "val": np.sort(order[: self.num_val]),
        }
        grey_train = to_grayscale(train_images)
        arrays = {
            split: (grey_train[index], train_labels[index]) for split, index in splits.items()
        }
        test_images, test_labels = parsed[TEST_FILES[0]]
        arrays["test"] = (to_grayscale(test_images), test_labels)
        tensors = {}
        for split, (pixels, labels) in arrays.items():
            tensors |= {
                f"{split}/{key}": value for key, value in pack_rows(pixels, torch.uint8).items()
            }
            tensors[f"{split}/labels"] = torch.from_numpy(np.ascontiguousarray(labels))
        return tensors
