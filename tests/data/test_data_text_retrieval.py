"""Text (IMDb bytes) and Retrieval (AAN pairs): parsing, tokens, truncation, errors."""

from __future__ import annotations

import pytest
import torch
from helpers.data_fixtures import (
    AAN_ROWS,
    IMDB_REVIEWS,
    write_aan_release,
    write_imdb_archive,
    write_imdb_folder,
)

import linarena.data.text as text_module
from linarena.data import DataFormatError, DataNotFoundError, RetrievalDataModule, TextDataModule
from linarena.data.retrieval import read_aan_tsv


def byte_tokens(content: bytes) -> list[int]:
    return [b + 1 for b in content]


def all_items(dataset) -> list[tuple[list[int], int]]:
    return [(tokens.tolist(), label) for tokens, label in (dataset[i] for i in range(len(dataset)))]


def test_text_from_folder_tokens_labels_and_splits(tmp_path):
    write_imdb_folder(tmp_path)
    dm = TextDataModule(tmp_path, batch_size=8, max_length=16, download=False)
    assert (dm.vocab_size, dm.num_classes, dm.max_length, dm.head_kind) == (257, 2, 16, "sequence")
    dm.setup()
    train = all_items(dm.datasets["train"])
    # Path order: neg before pos, then file name.
    assert train == [
        (byte_tokens(b"Awful."), 0),
        (byte_tokens(b"Great film!"), 1),
        (byte_tokens((b"Loved it " * 10)[:16]), 1),  # truncated to max_length bytes
    ]
    assert all_items(dm.datasets["val"]) == all_items(dm.datasets["test"])  # test doubles as val
    assert all_items(dm.datasets["test"])[0] == (byte_tokens(b"Boring \xc3\xa9"), 0)
    batch = next(iter(dm.test_dataloader()))
    assert batch["tokens"].shape == (3, 16)
    assert batch["mask"].sum(dim=1).tolist() == [9, 3, 16]
    assert batch["tokens"][batch["mask"]].min() >= 1  # byte 0 would be token 1, never padding


def test_text_archive_gives_the_same_data_as_the_folder(tmp_path):
    write_imdb_folder(tmp_path / "a")
    write_imdb_archive(tmp_path / "b")
    folder = TextDataModule(tmp_path / "a", max_length=64, download=False)
    archive = TextDataModule(tmp_path / "b", max_length=64, download=False)
    folder.setup()
    archive.setup()
    for split in ("train", "val", "test"):
        assert all_items(folder.datasets[split]) == all_items(archive.datasets[split])
    assert len(archive.datasets["train"]) == sum(k.startswith("train/") for k in IMDB_REVIEWS)


def test_text_missing_lists_files_folder_and_url(tmp_path):
    dm = TextDataModule(tmp_path, download=False)
    with pytest.raises(DataNotFoundError) as error:
        dm.prepare_data()
    message = str(error.value)
    assert str(tmp_path.resolve() / "aclImdb_v1.tar.gz") in message
    assert str(tmp_path.resolve() / "aclImdb") in message
    assert "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz" in message
    assert "python scripts/prepare_data.py data=text" in message


def test_text_corrupt_archive_is_named(tmp_path):
    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(b"not a gzip file")
    with pytest.raises(DataFormatError, match=r"aclImdb_v1\.tar\.gz"):
        TextDataModule(tmp_path, download=False).prepare_data()


def test_retrieval_pairs_tokens_truncation(tmp_path):
    write_aan_release(tmp_path)
    dm = RetrievalDataModule(tmp_path, batch_size=2, max_length=20)
    assert (dm.head_kind, dm.vocab_size, dm.num_classes, dm.max_length) == ("pair", 257, 2, 20)
    dm.setup()
    assert {split: len(ds) for split, ds in dm.datasets.items()} == {
        "train": 2,
        "val": 2,
        "test": 2,
    }
    batch = next(iter(dm.train_dataloader()))
    assert batch["tokens"].shape == batch["mask"].shape == (2, 2, 20)
    (first, second), label = dm.datasets["test"][0]
    assert first.tolist() == byte_tokens(AAN_ROWS[0][3]) and label == 1
    assert second.tolist() == byte_tokens(AAN_ROWS[0][4])
    (first, _), label = dm.datasets["test"][1]
    assert first.tolist() == byte_tokens(b"x" * 20) and label == 0  # truncated to 20
    assert torch.equal(batch["mask"], batch["tokens"] != 0)


def test_retrieval_release_in_nested_folder_is_found(tmp_path):
    write_aan_release(tmp_path / "lra_release")  # -> lra_release/lra_release/tsv_data
    dm = RetrievalDataModule(tmp_path, max_length=8)
    dm.setup()
    assert len(dm.datasets["val"]) == len(AAN_ROWS)


@pytest.mark.parametrize(
    ("line", "message"),
    [(b"1.0\tA\tB\tonly four fields\n", "5 tab-separated"), (b"yes\tA\tB\tx\ty\n", "label")],
)
def test_retrieval_malformed_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "new_aan_pairs.train.tsv"
    path.write_bytes(b"0.0\tA\tB\tgood\tline\n" + line)
    with pytest.raises(DataFormatError, match=message) as error:
        read_aan_tsv(path, max_length=10)
    assert f"{path}:2" in str(error.value)


def test_retrieval_missing_lists_every_file_and_url(tmp_path):
    with pytest.raises(DataNotFoundError) as error:
        RetrievalDataModule(tmp_path).prepare_data()
    message = str(error.value)
    for split in ("train", "eval", "test"):
        assert (
            str(tmp_path.resolve() / f"lra_release/tsv_data/new_aan_pairs.{split}.tsv") in message
        )
    assert "https://storage.googleapis.com/long-range-arena/lra_release.gz" in message
    assert "python scripts/prepare_data.py data=retrieval" in message


def test_text_downloads_the_archive_when_absent(tmp_path, monkeypatch):
    source = write_imdb_archive(tmp_path / "server")
    monkeypatch.setattr(text_module, "IMDB_URL", source.as_uri())
    dm = TextDataModule(tmp_path / "data", max_length=64, download=True)
    dm.setup()
    assert (tmp_path / "data" / "aclImdb_v1.tar.gz").read_bytes() == source.read_bytes()
    assert len(dm.datasets["test"]) == sum(k.startswith("test/") for k in IMDB_REVIEWS)
    assert not list((tmp_path / "data").glob(".*part"))


def test_failed_download_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(text_module, "IMDB_URL", (tmp_path / "absent.tar.gz").as_uri())
    with pytest.raises(DataNotFoundError, match="automatic download failed"):
        TextDataModule(tmp_path / "data", download=True).prepare_data()
    left = [p.name for p in (tmp_path / "data").iterdir() if p.name != "cache"]
    assert not [name for name in left if not name.endswith(".lock")]
