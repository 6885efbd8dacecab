"""Tiny data files in the exact official formats, for the tests of linarena.data."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from helpers.paths import FIXTURES

# data=sequences' example folder, committed: train.tsv and test.tsv (no val.tsv: validation is a
# share of train.tsv), labels 0-2, token ids 0-19.
SEQUENCES_EXAMPLE = FIXTURES / "sequences"


def write_sequences_folder(data_dir: Path) -> Path:
    """Copy the example folder of data=sequences to `data_dir`/sequences (its default path)."""
    return Path(shutil.copytree(SEQUENCES_EXAMPLE, data_dir / "sequences"))


# (expression, label) lines as in the release's listops-1000 tsv files.
LISTOPS_LINES = [
    ("( ( ( [MAX 2 ) 9 ) ] )", 9),
    ("( ( ( ( [SM 3 ) 4 ) ( ( ( [MIN 5 ) 1 ) ] ) ) ] )", 8),
    ("( ( ( ( ( [MED 7 ) 1 ) 4 ) 2 ) ] )", 3),
]


def write_listops_release(data_dir: Path, lines=LISTOPS_LINES) -> Path:
    """Write lra_release/listops-1000/basic_{train,val,test}.tsv with `lines` in each file."""
    folder = data_dir / "lra_release" / "listops-1000"
    folder.mkdir(parents=True)
    for split in ("train", "val", "test"):
        rows = ["Source\tTarget"] + [f"{source}\t{target}" for source, target in lines]
        (folder / f"basic_{split}.tsv").write_text("\n".join(rows) + "\n")
    return folder


IMDB_REVIEWS = {
    "train/pos/0_9.txt": b"Great film!",
    "train/pos/1_8.txt": b"Loved it " * 10,
    "train/neg/0_2.txt": b"Awful.",
    "test/pos/0_10.txt": b"Wonderful <br />acting",
    "test/neg/0_1.txt": b"Boring \xc3\xa9",
    "test/neg/1_3.txt": b"Meh",
}


def write_imdb_folder(data_dir: Path) -> Path:
    """Write aclImdb/{train,test}/{pos,neg}/*.txt plus an unsup file that must be ignored."""
    for name, content in IMDB_REVIEWS.items():
        path = data_dir / "aclImdb" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    unsup = data_dir / "aclImdb" / "train" / "unsup" / "0_0.txt"
    unsup.parent.mkdir(parents=True)
    unsup.write_bytes(b"unlabelled")
    return data_dir / "aclImdb"


def _add_bytes(tar: tarfile.TarFile, name: str, content: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    tar.addfile(info, io.BytesIO(content))


def write_imdb_archive(data_dir: Path) -> Path:
    """Write aclImdb_v1.tar.gz with the same reviews (members named aclImdb/...)."""
    path = data_dir / "aclImdb_v1.tar.gz"
    data_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        _add_bytes(tar, "aclImdb/README", b"readme")
        for name, content in IMDB_REVIEWS.items():
            _add_bytes(tar, f"aclImdb/{name}", content)
        _add_bytes(tar, "aclImdb/train/unsup/0_0.txt", b"unlabelled")
    return path


# (label, id1, id2, text1, text2) rows of the AAN tsv files.
AAN_ROWS = [
    ("1.0", "P01-1001", "P02-2002", b"attention is all", b"we cite attention"),
    ("0.0", "P03-3003", "P04-4004", b"x" * 50, b"unrelated text"),
]


def write_aan_release(data_dir: Path, rows=AAN_ROWS) -> Path:
    """Write lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv (no header)."""
    folder = data_dir / "lra_release" / "tsv_data"
    folder.mkdir(parents=True)
    content = b"".join(
        b"\t".join([label.encode(), id1.encode(), id2.encode(), text1, text2]) + b"\n"
        for label, id1, id2, text1, text2 in rows
    )
    for split in ("train", "eval", "test"):
        (folder / f"new_aan_pairs.{split}.tsv").write_bytes(content)
    return folder


def cifar_records(count: int, seed: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Binary CIFAR-10 records: (file bytes, labels (n,), RGB images (n, 3, 32, 32) uint8)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=count).astype(np.uint8)
    images = rng.integers(0, 256, size=(count, 3, 32, 32)).astype(np.uint8)
    records = np.concatenate([labels[:, None], images.reshape(count, -1)], axis=1)
    return records.tobytes(), labels, images


def write_cifar_folder(
    data_dir: Path, per_file: int = 4
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write cifar-10-batches-bin/ with 5 train files and a test file; return labels/images."""
    folder = data_dir / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    written = {}
    names = [f"data_batch_{k}.bin" for k in range(1, 6)] + ["test_batch.bin"]
    for index, name in enumerate(names):
        data, labels, images = cifar_records(per_file, seed=index)
        (folder / name).write_bytes(data)
        written[name] = (labels, images)
    (folder / "batches.meta.txt").write_text("airplane\n")
    return written


def write_cifar_archive(data_dir: Path) -> Path:
    """Pack an existing cifar-10-batches-bin/ folder into cifar-10-binary.tar.gz."""
    path = data_dir / "cifar-10-binary.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(data_dir / "cifar-10-batches-bin", arcname="cifar-10-batches-bin")
    return path


def write_pathfinder_release(
    data_dir: Path,
    resolution: int = 32,
    count: int = 12,
    per_folder: int = 5,
    empty: tuple[int, ...] = (3,),
    difficulty: str = "curv_contour_length_14",
) -> tuple[Path, dict[int, tuple[np.ndarray, int]]]:
    """Write lra_release/pathfinder<res>/<difficulty>/ with PNGs and text metadata.

    Image i has label i % 2 and pixel values from a seeded generator; images in `empty` are empty
    files. Returns the folder and {index: (pixels (res, res) uint8, label)} of the non-empty ones.
    """
    folder = data_dir / "lra_release" / f"pathfinder{resolution}" / difficulty
    rng = np.random.default_rng(0)
    images = {}
    metadata: dict[int, list[str]] = {}
    for index in range(count):
        k = index // per_folder
        image_dir = folder / "imgs" / str(k)
        image_dir.mkdir(parents=True, exist_ok=True)
        path = image_dir / f"sample_{index}.png"
        label = index % 2
        if index in empty:
            path.write_bytes(b"")
        else:
            pixels = rng.integers(0, 256, size=(resolution, resolution)).astype(np.uint8)
            Image.fromarray(pixels, mode="L").save(path)
            images[index] = (pixels, label)
        metadata.setdefault(k, []).append(f"imgs/{k} sample_{index}.png {index} {label} 3 1.5 2\n")
    (folder / "metadata").mkdir(parents=True)
    for k, lines in metadata.items():
        (folder / "metadata" / f"{k}.npy").write_text("".join(lines))
    return folder, images
