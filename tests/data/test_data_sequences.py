"""data=sequences: your own labelled token sequences from train/val/test.tsv files (format:
linarena.data.sequences). Sizes read or checked, bad lines named by file and line, the validation
share of train.tsv, the cache following the files, and training on it from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.training import compose_config, run_train
from hydra.core.hydra_config import HydraConfig

from linarena.data import DataFormatError, DataNotFoundError, SequencesDataModule
from linarena.data.errors import DataConfigError
from linarena.errors import LinarenaError
from linarena.training.run import train

TRAIN = ["0\t0 5 5 2", "1\t3 1", "2\t4 4 4 4 4 4", "0\t1", "1\t2 3 0", "2\t5 0 5",
         "0\t3 3 3", "1\t1 1", "2\t0", "1\t2 2 2 2"]
TEST = ["1\t5 5", "0\t0 1 2", "2\t3"]


@pytest.fixture(autouse=True)
def reset_hydra():
    yield
    HydraConfig.instance().cfg = None


def write_folder(folder: Path, train: list[str] = TRAIN, test: list[str] = TEST,
                 val: list[str] | None = None) -> Path:
    """train.tsv, test.tsv (and val.tsv when given) with these lines."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": train, "test": test} | ({"val": val} if val is not None else {})
    for split, lines in files.items():
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def sequences(tmp_path: Path, **settings) -> SequencesDataModule:
    return SequencesDataModule(tmp_path / "data", tmp_path / "mine", batch_size=16, **settings)


def test_sizes_are_read_from_the_files_and_id_0_is_a_real_token(tmp_path: Path) -> None:
    write_folder(tmp_path / "mine")
    datamodule = sequences(tmp_path)
    # Ids 0..5 and labels 0..2 in the files; the model's vocabulary adds the padding id.
    assert (datamodule.vocab_size, datamodule.user_vocab_size, datamodule.num_classes) == (7, 6, 3)
    batch = next(iter(datamodule.test_dataloader()))
    assert batch["tokens"][:, :3].tolist() == [[6, 6, 0], [1, 2, 3], [4, 0, 0]]
    assert batch["mask"].sum(1).tolist() == [2, 3, 1] and batch["label"].tolist() == [1, 0, 2]


def test_given_sizes_are_used_and_checked_line_by_line(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "mine")
    assert sequences(tmp_path, vocab_size=100, num_classes=4).vocab_size == 101
    with pytest.raises(DataFormatError, match=r"train\.tsv:1: token id 5 is not below "
                       r"vocab_size=5; the largest token id in this file is 5: set "
                       r"data\.vocab_size=6") as error:
        sequences(tmp_path, vocab_size=5, num_classes=3).setup()
    assert error.value.path == folder / "train.tsv" and isinstance(error.value, LinarenaError)
    with pytest.raises(DataFormatError, match=r"train\.tsv:3: label 2 is not below "
                       r"num_classes=2.*set data\.num_classes=3"):
        sequences(tmp_path, vocab_size=6, num_classes=2).setup()


@pytest.mark.parametrize(("line", "expected"), [
    (b"1 5 6", "expected 2 tab-separated fields, <label><TAB><token ids>, got 1: '1 5 6'"),
    (b"1\t5\t6", "expected 2 tab-separated fields, <label><TAB><token ids>, got 3"),
    (b"pos\t5 6", "the label must be a non-negative integer, got 'pos'"),
    (b"-1\t5 6", "the label must be a non-negative integer, got '-1'"),
    (b"1\t5 -3", "token ids must be non-negative integers (up to 18 digits) separated by "
                 "spaces, got '-3'"),
    (b"1\t5 2.0", "token ids must be non-negative integers (up to 18 digits) separated by "
                  "spaces, got '2.0'"),
    (b"1\t", "no token ids after the label"),
    (b"1\t5 \xff", "not UTF-8 text"),
])
def test_a_bad_line_is_named_with_its_file_line_and_what_was_expected(
    tmp_path: Path, line: bytes, expected: str
) -> None:
    folder = write_folder(tmp_path / "mine")
    (folder / "test.tsv").write_bytes(b"1\t5 5\n\n" + line + b"\n")  # line 3 (2 is blank)
    with pytest.raises(DataFormatError) as error:
        sequences(tmp_path)
    assert str(error.value).startswith(f"{folder / 'test.tsv'}:3: ")
    assert expected in str(error.value)


def test_a_line_longer_than_max_length_is_an_error_unless_truncation_is_asked_for(
    tmp_path: Path
) -> None:
    write_folder(tmp_path / "mine")
    with pytest.raises(DataFormatError, match=r"train\.tsv:3: 6 token ids, more than "
                       r"data\.max_length=4; the longest line of this file has 6: raise "
                       r"data\.max_length, or set data\.truncate=true"):
        sequences(tmp_path, max_length=4).setup()
    datamodule = sequences(tmp_path, max_length=4, truncate=True)
    datamodule.setup()
    lengths = datamodule.datasets["train"].sequences.lengths()
    assert lengths.max() == 4 and lengths.sum() < sum(len(x.split()) - 1 for x in TRAIN)


def test_missing_files_say_where_it_looked_and_the_format(tmp_path: Path) -> None:
    datamodule = sequences(tmp_path)  # builds without the folder: configs compose without data
    with pytest.raises(DataNotFoundError) as error:
        datamodule.check_available()
    message = str(error.value)
    assert f"not found in {tmp_path / 'mine'} (data.path): it does not exist" in message
    assert "<label><TAB><token ids separated by spaces>" in message and "data.path" in message
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.tsv").write_text("1\t2\n")
    with pytest.raises(DataNotFoundError, match=r"\(data\.path\): no test\.tsv"):
        sequences(tmp_path).setup()


def test_without_val_tsv_a_seeded_share_of_train_validates(tmp_path: Path) -> None:
    write_folder(tmp_path / "mine")

    def split(seed: int) -> tuple[list, list]:
        datamodule = sequences(tmp_path, seed=seed, val_fraction=0.3)
        tensors = datamodule.load_tensors()
        return tensors["train/labels"].tolist(), tensors["val/offsets"].tolist()

    train, val = split(0)
    assert len(train) == 7 and len(val) == 3 + 1  # 3 validation sequences, 4 offsets
    assert split(0) == (train, val) and split(1) != (train, val)
    with pytest.raises(DataConfigError, match=r"train\.tsv has 10 examples.*gives 0"):
        sequences(tmp_path, val_fraction=0.01).setup()


def test_a_val_tsv_is_read_and_an_edited_file_is_read_again(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "mine", val=["2\t1 2"])
    first = sequences(tmp_path)
    first.setup()
    assert [len(first.datasets[split]) for split in ("train", "val", "test")] == [10, 1, 3]
    cache = first.cache_path
    write_folder(folder, val=["2\t1 2", "0\t3"])
    again = sequences(tmp_path)
    again.setup()
    assert again.cache_path != cache and len(again.datasets["val"]) == 2


def test_settings_that_cannot_work_are_refused_when_built(tmp_path: Path) -> None:
    with pytest.raises(DataConfigError, match=r"data\.num_classes must be an integer >= 2"):
        sequences(tmp_path, num_classes=1)
    with pytest.raises(DataConfigError, match=r"data\.val_fraction must be in \(0, 1\)"):
        sequences(tmp_path, val_fraction=1.0)
    write_folder(tmp_path / "mine", train=["0\t1", "0\t2"], test=["0\t3"])
    with pytest.raises(DataConfigError, match="at least 2 classes"):
        sequences(tmp_path)


def test_the_preset_trains_with_fast_dev_run(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "mine")
    cfg = compose_config(["data=sequences", f"data.path={folder}", "attention=gla", "debug=fdr",
                          f"paths.data_dir={tmp_path / 'data'}", "data.batch_size=4"],
                         output_dir=tmp_path / "run")
    train(cfg)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["task"] == "sequences" and summary["attention"] == "gla"
    assert 0 <= summary["metrics"]["test/acc"] <= 1


def test_a_sweep_compares_two_attentions_on_your_folder(tmp_path: Path) -> None:
    """The command of the preset's comment: python train.py -m data=sequences data.path=..."""
    folder = write_folder(tmp_path / "mine")
    sweep = tmp_path / "sweep"
    done = run_train(["-m", "data=sequences", f"data.path={folder}", "attention=gla,elu",
                      "debug=fdr", "trainer.enable_progress_bar=false",
                      f"hydra.sweep.dir={sweep}"], tmp_path, tmp_path / "data")
    assert done.returncode == 0, done.stderr[-4000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert [s["attention"] for s in summaries] == ["gla", "elu"]
    assert len(list((tmp_path / "data" / "cache").glob("sequences-*.pt"))) == 1
    assert torch.isfinite(torch.tensor([s["metrics"]["test/loss"] for s in summaries])).all()
