"""An official-format file replaced after its cache was built is read again: the cache of every
task that reads files the user puts in the data folder (ListOps, text, retrieval, image,
Pathfinder release folders) is keyed by those files' sizes and modification times, as
data=sequences' is, so the stale cache is not served."""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers.data_fixtures import (
    AAN_ROWS,
    LISTOPS_LINES,
    cifar_records,
    write_aan_release,
    write_cifar_archive,
    write_cifar_folder,
    write_imdb_archive,
    write_imdb_folder,
    write_listops_release,
    write_pathfinder_release,
)
from PIL import Image

from linarena.data import (
    ImageDataModule,
    ListOpsDataModule,
    PathfinderDataModule,
    RetrievalDataModule,
    TextDataModule,
)
from linarena.data.base import TaskDataModule


def replaced(path: Path, write: Callable[[Path], object]) -> None:
    """Replace the file at `path` by what `write(path)` writes, its modification time a second
    after the old one (as a copy made later has; a file system's clock may be coarse)."""
    before = path.stat().st_mtime_ns
    write(path)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def write_image_archive(data_dir: Path) -> None:
    """cifar-10-binary.tar.gz alone in the data folder (its source folder beside it)."""
    source = data_dir.parent / "source"
    write_cifar_folder(source)
    data_dir.mkdir()
    shutil.copy(write_cifar_archive(source), data_dir)


def replace_listops(data_dir: Path) -> None:
    rows = ["Source\tTarget"] + [f"{s}\t{t}" for s, t in LISTOPS_LINES[:2]]
    replaced(data_dir / "lra_release/listops-1000/basic_train.tsv",
             lambda p: p.write_text("\n".join(rows) + "\n"))


def replace_retrieval(data_dir: Path) -> None:
    label, id1, id2, text1, text2 = AAN_ROWS[0]
    line = b"\t".join([label.encode(), id1.encode(), id2.encode(), text2, text1]) + b"\n"
    replaced(data_dir / "lra_release/tsv_data/new_aan_pairs.train.tsv",
             lambda p: p.write_bytes(line))


def replace_text_folder(data_dir: Path) -> None:
    replaced(data_dir / "aclImdb/train/pos/0_9.txt", lambda p: p.write_bytes(b"Poor film!"))


def replace_text_archive(data_dir: Path) -> None:
    source = data_dir.parent / "other"
    write_imdb_folder(source)
    (source / "aclImdb/train/pos/0_9.txt").write_bytes(b"Poor film!")

    def archive(path: Path) -> None:
        with tarfile.open(path, "w:gz") as tar:
            tar.add(source / "aclImdb", arcname="aclImdb")

    replaced(data_dir / "aclImdb_v1.tar.gz", archive)


def replace_image_folder(data_dir: Path) -> None:
    replaced(data_dir / "cifar-10-batches-bin/test_batch.bin",
             lambda p: p.write_bytes(cifar_records(4, seed=99)[0]))


def replace_image_archive(data_dir: Path) -> None:
    source = data_dir.parent / "source"
    (source / "cifar-10-batches-bin/test_batch.bin").write_bytes(cifar_records(4, seed=99)[0])
    replaced(data_dir / "cifar-10-binary.tar.gz",
             lambda p: shutil.copy(write_cifar_archive(source), p))


def replace_pathfinder(data_dir: Path) -> None:
    pixels = np.full((32, 32), 7, dtype=np.uint8)
    image = data_dir / "lra_release/pathfinder32/curv_contour_length_14/imgs/1/sample_6.png"
    replaced(image, lambda p: Image.fromarray(pixels, mode="L").save(p))


# task: (write its files in the data folder, build its module there, replace one file)
TASKS: dict[str, tuple[Callable, Callable[[Path], TaskDataModule], Callable]] = {
    "listops": (write_listops_release, ListOpsDataModule, replace_listops),
    "retrieval": (write_aan_release, RetrievalDataModule, replace_retrieval),
    "text folder": (write_imdb_folder, lambda d: TextDataModule(d, max_length=64, download=False),
                    replace_text_folder),
    "text archive": (write_imdb_archive,
                     lambda d: TextDataModule(d, max_length=64, download=False),
                     replace_text_archive),
    "image folder": (write_cifar_folder, lambda d: ImageDataModule(d, num_val=2, download=False),
                     replace_image_folder),
    "image archive": (write_image_archive,
                      lambda d: ImageDataModule(d, num_val=2, download=False),
                      replace_image_archive),
    "pathfinder": (lambda d: write_pathfinder_release(d, count=12, empty=()),
                   lambda d: PathfinderDataModule(d, num_train=100, num_val=2, num_test=2),
                   replace_pathfinder),
}


def contents(dm: TaskDataModule) -> list[str]:
    """Every example of every split, as text (tokens and label; pairs: both documents)."""
    dm.setup()
    return [repr(dm.datasets[split][i]) for split in ("train", "val", "test")
            for i in range(len(dm.datasets[split]))]


@pytest.mark.parametrize("task", list(TASKS))
def test_a_replaced_source_file_is_read_again_not_served_from_the_stale_cache(
    tmp_path: Path, task: str
) -> None:
    write, module, replace = TASKS[task]
    data_dir = tmp_path / "data"
    write(data_dir)
    first = module(data_dir)
    before = contents(first)
    assert first.cache_path.is_file() and contents(module(data_dir)) == before
    replace(data_dir)
    with pytest.warns(RuntimeWarning, match=r"was built before its source .* changed"):
        assert contents(module(data_dir)) != before


def test_a_release_deleted_after_the_build_leaves_its_cache_usable(tmp_path: Path) -> None:
    write_aan_release(tmp_path)
    before = contents(RetrievalDataModule(tmp_path))
    shutil.rmtree(tmp_path / "lra_release")
    assert contents(RetrievalDataModule(tmp_path)) == before
