"""Pathfinder and Path-X (LRA): are the two dots connected by a curve? One pixel per token."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from linarena.data.base import TaskDataModule, check_generator_workers, check_split_sizes
from linarena.data.batching import pack_rows
from linarena.data.errors import (
    DataConfigError,
    DataFormatError,
    excerpt,
    in_generated_folder,
)
from linarena.data.pathfinder_generator import (
    GENERATOR_VERSION,
    RESOLUTIONS,
    generate_pathfinder,
)
from linarena.data.progress import progress as progress_bar
from linarena.data.sources import check_source, lra_release_path, reads_official
from linarena.data.spec import TaskSpec
from linarena.data.text import BYTE_VOCAB_SIZE

log = logging.getLogger(__name__)

DIFFICULTY_NAMES = ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")


def read_pathfinder_metadata(dataset_dir: Path) -> list[tuple[Path, int]]:
    """(image path, label) for every line of `metadata/<k>.npy`, folders in numeric order.

    The metadata files are text despite the extension: `imgs/<k> sample_<i>.png <i> <label> ...`.
    """
    metadata_files = sorted(
        (dataset_dir / "metadata").glob("*.npy"),
        key=lambda path: (
            not path.stem.isdigit(),
            int(path.stem) if path.stem.isdigit() else 0,
            path.stem,
        ),
    )
    records = []
    for metadata in metadata_files:
        try:
            lines = metadata.read_bytes().decode("utf-8").splitlines()
        except UnicodeDecodeError as error:
            line = metadata.read_bytes()[: error.start].count(b"\n") + 1
            raise DataFormatError(
                metadata, line, "not UTF-8 text (a metadata file of the release is plain text "
                "lines 'imgs/<k> sample_<i>.png <i> <label> ...'); replace the file"
            ) from None
        for line_number, line in enumerate(lines, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                raise DataFormatError(
                    metadata,
                    line_number,
                    "expected 'imgs/<k> sample_<i>.png <i> <label> ...' with label 0 or 1, "
                    f"got {excerpt(metadata, line.strip())}",
                )
            records.append((dataset_dir / fields[0] / fields[1], int(fields[3])))
    return records


def grey_pixels(image: Image.Image) -> np.ndarray:
    """8-bit grey pixels (height, width) uint8 of an image; 16-bit images are scaled (v * 255 /
    65535, rounded), not clipped at 255 as Image.convert("L") would."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        values = np.asarray(image).astype(np.int64)
        if values.min() < 0 or values.max() > 65535:
            raise ValueError(f"{image.mode} pixel values outside 0..65535")
        return ((values * 255 + 32767) // 65535).astype(np.uint8)
    return np.asarray(image.convert("L"))


def read_pathfinder_images(
    records: list[tuple[Path, int]], resolution: int, progress: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Grey pixels uint8 (n, resolution**2) and labels int64 (n,); empty image files skipped."""
    pixels = np.empty((len(records), resolution * resolution), dtype=np.uint8)
    labels = np.empty(len(records), dtype=np.int64)
    count = 0
    for path, label in progress_bar(records, desc="Pathfinder images", unit="img",
                                    disable=not progress):
        try:
            if path.stat().st_size == 0:
                continue  # the release has some empty files
            with Image.open(path) as image:
                grey = grey_pixels(image)
        except FileNotFoundError:
            raise DataFormatError(path, None, "listed in the metadata but missing") from None
        except (OSError, ValueError) as error:
            raise DataFormatError(path, None, f"cannot read the image ({error})") from error
        if grey.shape != (resolution, resolution):
            raise DataFormatError(
                path,
                None,
                f"image is {grey.shape[1]}x{grey.shape[0]}, expected {resolution}x{resolution}",
            )
        pixels[count] = grey.reshape(-1)
        labels[count] = label
        count += 1
    if count < len(records):
        log.info("Skipped %d empty Pathfinder image files", len(records) - count)
    return pixels[:count], labels[:count]


class PathfinderDataModule(TaskDataModule):
    """Pathfinder images as resolution**2 grey pixel tokens; 2 classes.

    Tokens: pixel + 1 (vocabulary 257, every pixel real), or with `zero_pixel_is_padding` the
    pixel itself with black pixels (0) masked as padding (vocabulary 256), as the LRA code does.

    Reads `<data_dir>/lra_release/pathfinder<res>/<difficulty>/` when present (or with
    `source="official"`), otherwise generates `num_train + num_val + num_test` images in the same
    layout under `<data_dir>/pathfinder/generated/seed<seed>-n<count>/` with
    `linarena.data.pathfinder_generator`. Usable images are shuffled by `seed`; the first `num_val`
    are the validation split, the next `num_test` the test split, and up to `num_train` of the
    rest the training split. Resolution 128 is Path-X (name "pathx").
    """

    def __init__(
        self,
        data_dir: str | Path,
        batch_size: int = 512,
        num_workers: int = 0,
        seed: int = 0,
        max_length: int = 1024,
        resolution: int = 32,
        difficulty: str = "curv_contour_length_14",
        source: str = "auto",
        num_train: int = 160_000,
        num_val: int = 20_000,
        num_test: int = 20_000,
        generator_workers: int | None = None,
        zero_pixel_is_padding: bool = False,
    ) -> None:
        check_source(source)
        if resolution not in RESOLUTIONS:
            raise DataConfigError(
                f"data.resolution must be one of {RESOLUTIONS}, got {resolution}"
            )
        if max_length != resolution * resolution:
            raise DataConfigError(
                f"data.max_length must be resolution**2 = {resolution**2} for "
                f"data.resolution={resolution}, got {max_length}"
            )
        if difficulty not in DIFFICULTY_NAMES:
            raise DataConfigError(
                f"data.difficulty must be one of {', '.join(DIFFICULTY_NAMES)}, got {difficulty!r}"
            )
        check_split_sizes(num_train, num_val, num_test)
        check_generator_workers(generator_workers)
        # token = pixel, so black pixels get the padding id 0; else pixel + 1, all real.
        self.token_shift = 0 if zero_pixel_is_padding else 1
        vocab_size = BYTE_VOCAB_SIZE - 1 + self.token_shift
        name = "pathx" if resolution == 128 else f"pathfinder{resolution}"
        spec = TaskSpec(name, "sequence", vocab_size, 2, max_length)
        super().__init__(spec, data_dir, batch_size, num_workers, seed)
        self.resolution, self.difficulty, self.source = resolution, difficulty, source
        self.sizes = {"train": num_train, "val": num_val, "test": num_test}
        self.generator_workers = generator_workers

    @property
    def relative_dir(self) -> str:
        return f"pathfinder{self.resolution}/{self.difficulty}"

    @property
    def official_dir(self) -> Path | None:
        """The release's folder for this resolution and difficulty, or None when absent."""
        folder = lra_release_path(self.data_dir, self.relative_dir)
        return folder if folder is not None and (folder / "metadata").is_dir() else None

    def uses_official(self) -> bool:
        expected = [
            f"lra_release/{self.relative_dir}/metadata/<k>.npy",
            f"lra_release/{self.relative_dir}/imgs/<k>/sample_<i>.png",
        ]
        config = "pathx" if self.resolution == 128 else "pathfinder"  # the data= name
        return reads_official(self.source, self.official_dir, config, expected, self.data_dir)

    def check_sources(self) -> None:
        self.uses_official()  # raises when data.source=official and the release is absent

    @property
    def generated_root(self) -> Path:
        total = sum(self.sizes.values())
        return self.data_dir / "pathfinder" / "generated" / f"seed{self.seed}-n{total}"

    def cache_config(self) -> dict[str, Any]:
        source = "official" if self.uses_official() else "generated"
        generator = {"generator_version": GENERATOR_VERSION} if source == "generated" else {}
        return {
            **generator,
            "source": source,
            "resolution": self.resolution,
            "difficulty": self.difficulty,
            "seed": self.seed,
            "sizes": self.sizes,
        }

    def source_files(self) -> dict[str, Path]:
        if not self.uses_official():
            return {}  # generated: its folder is keyed by the seed and the generator version
        # The release's images and the metadata that lists them.
        return {f"{self.relative_dir}/{name}": self.official_dir / name
                for name in ("imgs", "metadata")}

    def dataset_dir(self) -> Path:
        """Folder with `imgs/` and `metadata/`: the release's, or a generated one."""
        official = self.official_dir if self.uses_official() else None
        if official is not None:
            return official
        generate_pathfinder(
            self.generated_root,
            self.resolution,
            self.difficulty,
            sum(self.sizes.values()),
            seed=self.seed,
            workers=self.generator_workers,
        )
        return self.generated_root / self.relative_dir

    def build(self) -> dict[str, torch.Tensor]:
        dataset_dir = self.dataset_dir()
        try:
            pixels, labels = read_pathfinder_images(
                read_pathfinder_metadata(dataset_dir), self.resolution
            )
        except DataFormatError as error:
            if self.uses_official():
                raise
            raise in_generated_folder(error, self.generated_root) from None
        num_val, num_test = self.sizes["val"], self.sizes["test"]
        if len(labels) <= num_val + num_test:
            raise DataConfigError(
                f"only {len(labels)} usable Pathfinder images in {dataset_dir}; need "
                f"more than data.num_val + data.num_test = {num_val + num_test}: lower those, "
                "or check the image files (empty files are skipped)"
            )
        order = np.random.default_rng(self.seed).permutation(len(labels))
        splits = {
            "val": order[:num_val],
            "test": order[num_val : num_val + num_test],
            "train": order[num_val + num_test :][: self.sizes["train"]],
        }
        tensors = {}
        for split, index in splits.items():
            index = np.sort(index)
            tensors |= {
                f"{split}/{key}": value
                for key, value in pack_rows(pixels[index], torch.uint8).items()
            }
            tensors[f"{split}/labels"] = torch.from_numpy(labels[index])
        return tensors
