"""Image (CIFAR-10 binary) and the Pathfinder loader (release PNGs + metadata)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.data_fixtures import (
    cifar_records,
    write_cifar_archive,
    write_cifar_folder,
    write_pathfinder_release,
)

from linarena.data import DataFormatError, DataNotFoundError, ImageDataModule, PathfinderDataModule
from linarena.data.image import parse_cifar_records, to_grayscale


def test_grayscale_formula_on_known_pixels():
    rgb = np.array(
        [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255], [1, 1, 2]], dtype=np.uint8
    )
    images = rgb.T.reshape(1, 3, 1, 5)  # 1 image, channels first, 1 x 5 pixels
    # tf.image.rgb_to_grayscale (LRA): truncate(255.5 * sum(w * x / 255)) with w = 0.2989,
    # 0.5870, 0.1140: 76.37 -> 76, 149.98 -> 149 (rounding the luma would give 150), 29.13 -> 29,
    # 255.47 -> 255, 1.34 -> 1
    assert to_grayscale(images).tolist() == [[76, 149, 29, 255, 1]]


def test_image_split_sizes_tokens_and_labels(tmp_path):
    written = write_cifar_folder(tmp_path, per_file=4)
    dm = ImageDataModule(tmp_path, batch_size=64, num_val=5, download=False)
    assert (dm.vocab_size, dm.num_classes, dm.max_length, dm.name) == (257, 10, 1024, "image")
    dm.setup()
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 15, "val": 5, "test": 4}
    test_labels, test_images = written["test_batch.bin"]
    expected = torch.from_numpy(to_grayscale(test_images).astype(np.int64) + 1)
    batch = next(iter(dm.test_dataloader()))
    assert torch.equal(batch["tokens"], expected) and batch["mask"].all()
    assert batch["label"].tolist() == test_labels.tolist()
    # train + val are exactly the 20 training images, each once
    all_train = np.concatenate([written[f"data_batch_{k}.bin"][1] for k in range(1, 6)])
    expected_rows = {tuple(row) for row in to_grayscale(all_train).astype(np.int64) + 1}
    seen = [
        tuple(dm.datasets[s][i][0].tolist())
        for s in ("train", "val")
        for i in range(len(dm.datasets[s]))
    ]
    assert len(seen) == 20 and set(seen) == expected_rows


def test_image_validation_split_follows_the_seed(tmp_path):
    write_cifar_folder(tmp_path, per_file=4)

    def val_rows(seed):
        dm = ImageDataModule(tmp_path, num_val=5, seed=seed, download=False)
        dm.setup()
        return [dm.datasets["val"][i][0].tolist() for i in range(5)]

    assert val_rows(0) == val_rows(0)
    assert val_rows(0) != val_rows(1)


def test_image_archive_matches_folder(tmp_path):
    write_cifar_folder(tmp_path / "a")
    write_cifar_folder(tmp_path / "b")
    write_cifar_archive(tmp_path / "b")
    for name in (tmp_path / "b" / "cifar-10-batches-bin").iterdir():
        name.unlink()
    a, b = (ImageDataModule(tmp_path / x, num_val=5, download=False) for x in "ab")
    a.setup()
    b.setup()
    for split in ("train", "val", "test"):
        assert all(
            torch.equal(a.datasets[split][i][0], b.datasets[split][i][0])
            for i in range(len(a.datasets[split]))
        )


def test_cifar_malformed_files_are_named(tmp_path):
    data, _, _ = cifar_records(2, seed=0)
    with pytest.raises(DataFormatError, match="multiple of 3073") as error:
        parse_cifar_records(data[:-1], tmp_path / "data_batch_1.bin")
    assert "data_batch_1.bin" in str(error.value)
    bad = bytearray(data)
    bad[3073] = 12  # label of record 1
    with pytest.raises(DataFormatError, match="record 1 has label 12"):
        parse_cifar_records(bytes(bad), "test_batch.bin")


def test_image_missing_lists_files_folder_and_url(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        ImageDataModule(tmp_path, download=False).prepare_data()
    message = str(error.value)
    assert str(tmp_path.resolve() / "cifar-10-binary.tar.gz") in message
    assert str(tmp_path.resolve() / "cifar-10-batches-bin" / "data_batch_1.bin") in message
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz" in message
    assert "python scripts/prepare_data.py data=image" in message


def pathfinder_items(dataset) -> dict[tuple[int, ...], int]:
    return {tuple(dataset[i][0].tolist()): dataset[i][1] for i in range(len(dataset))}


def test_pathfinder_release_pixels_labels_and_empty_image(tmp_path):
    _, images = write_pathfinder_release(tmp_path, count=12, per_folder=5, empty=(3,))
    dm = PathfinderDataModule(tmp_path, batch_size=4, num_train=100, num_val=2, num_test=3)
    assert (dm.name, dm.max_length, dm.vocab_size, dm.num_classes) == ("pathfinder32", 1024, 257, 2)
    assert dm.uses_official()
    dm.setup()
    sizes = {s: len(d) for s, d in dm.datasets.items()}
    assert sizes == {"train": 6, "val": 2, "test": 3}  # 11 usable images: the empty one skipped
    seen = {}
    for split in ("train", "val", "test"):
        seen |= pathfinder_items(dm.datasets[split])
    expected = {
        tuple((pixels.reshape(-1).astype(int) + 1).tolist()): label
        for pixels, label in images.values()
    }
    assert seen == expected
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == (4, 1024) and batch["mask"].all()


def test_pathfinder_train_size_is_capped(tmp_path):
    write_pathfinder_release(tmp_path, count=12, empty=())
    dm = PathfinderDataModule(tmp_path, num_train=4, num_val=2, num_test=2)
    dm.setup()
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 4, "val": 2, "test": 2}


def test_pathfinder_malformed_metadata_names_file_and_line(tmp_path):
    folder, _ = write_pathfinder_release(tmp_path, count=4, per_folder=4)
    metadata = folder / "metadata" / "0.npy"
    lines = metadata.read_text().splitlines()
    lines[2] = "imgs/0 sample_2.png 2"
    metadata.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as error:
        PathfinderDataModule(tmp_path, num_val=1, num_test=1).prepare_data()
    assert f"{metadata}:3" in str(error.value)


def test_pathfinder_wrong_image_size_is_named(tmp_path):
    write_pathfinder_release(tmp_path, resolution=32, count=4)
    release = tmp_path / "lra_release"
    (release / "pathfinder32").rename(release / "pathfinder64")  # 32 px images where 64 belong
    dm = PathfinderDataModule(tmp_path, resolution=64, max_length=4096, num_val=1, num_test=1)
    with pytest.raises(DataFormatError, match="expected 64x64") as error:
        dm.prepare_data()
    assert "sample_0.png" in str(error.value)


def test_pathfinder_generated_when_release_absent(tmp_path):
    kwargs = {"num_train": 8, "num_val": 2, "num_test": 2, "generator_workers": 1}
    dm = PathfinderDataModule(tmp_path, **kwargs)
    dm.setup()
    assert not dm.uses_official()
    assert {s: len(d) for s, d in dm.datasets.items()} == {"train": 8, "val": 2, "test": 2}
    generated = tmp_path / "pathfinder/generated/seed0-n12/pathfinder32/curv_contour_length_14"
    assert (generated / "metadata").is_dir() and (generated / "imgs").is_dir()
    again = PathfinderDataModule(tmp_path / "other", **kwargs)
    again.setup()
    assert pathfinder_items(again.datasets["train"]) == pathfinder_items(dm.datasets["train"])


def test_pathfinder_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"data\.max_length must be resolution"):
        PathfinderDataModule(tmp_path, resolution=64, max_length=1024)
    with pytest.raises(ValueError, match="curv_contour_length_14"):
        PathfinderDataModule(tmp_path, difficulty="hard")
    pathx = PathfinderDataModule(tmp_path, resolution=128, max_length=16384)
    assert (pathx.name, pathx.max_length) == ("pathx", 16384)


def test_pathfinder_official_source_missing(tmp_path):
    dm = PathfinderDataModule(tmp_path, source="official")
    with pytest.raises(DataNotFoundError) as error:
        dm.prepare_data()
    message = str(error.value)
    assert str(tmp_path.resolve() / "lra_release/pathfinder32/curv_contour_length_14") in message
    assert "lra_release.gz" in message


def test_zero_pixel_is_padding_masks_black_pixels_and_keeps_pixel_values(tmp_path):
    """The LRA setting: token = pixel value, black (0) is padding, vocabulary 256."""
    written = write_cifar_folder(tmp_path, per_file=4)
    dm = ImageDataModule(tmp_path, num_val=5, download=False, zero_pixel_is_padding=True)
    assert dm.vocab_size == 256
    dm.setup()
    grey = torch.from_numpy(to_grayscale(written["test_batch.bin"][1]).astype(np.int64))
    grey[0, :40] = 0  # make sure some pixels are black
    dm.datasets["test"].sequences.values[:40] = 0
    batch = next(iter(dm.test_dataloader()))
    assert torch.equal(batch["tokens"], grey)
    assert torch.equal(batch["mask"], grey > 0)


def test_pathfinder_zero_pixel_is_padding(tmp_path):
    _, images = write_pathfinder_release(tmp_path, count=6, per_folder=5, empty=())
    dm = PathfinderDataModule(
        tmp_path, batch_size=6, num_train=100, num_val=1, num_test=1, zero_pixel_is_padding=True
    )
    assert dm.vocab_size == 256
    dm.setup()
    expected = {tuple(pixels.reshape(-1).astype(int).tolist()) for pixels, _ in images.values()}
    batch = next(iter(dm.train_dataloader()))
    assert {tuple(row) for row in batch["tokens"].tolist()} <= expected
    assert torch.equal(batch["mask"], batch["tokens"] > 0) and not batch["mask"].all()
