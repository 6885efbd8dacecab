"""What data preparation tells the user: progress off a terminal, and missing data found before
anything is built."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers.data_fixtures import write_aan_release

from linarena.data import (
    DataNotFoundError,
    ImageDataModule,
    ListOpsDataModule,
    MQARDataModule,
    RetrievalDataModule,
    TextDataModule,
)
from linarena.data.listops_generator import write_listops_files


def test_generation_off_a_terminal_logs_plain_lines_without_carriage_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sizes = {"train": 8, "val": 2, "test": 2}
    write_listops_files(tmp_path, sizes, workers=1, max_length=64, min_length=10)
    captured = capsys.readouterr()
    assert "\r" not in captured.err + captured.out  # pytest's capture is not a terminal
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ListOps:")]
    assert lines and lines[-1].startswith("ListOps: 12/12 expr (100%)")


def test_missing_files_are_found_without_building_anything(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with pytest.raises(DataNotFoundError, match=r"new_aan_pairs\.train\.tsv"):
        RetrievalDataModule(data_dir).check_available()
    with pytest.raises(DataNotFoundError, match=r"data\.download=false"):
        TextDataModule(data_dir, download=False).check_available()
    with pytest.raises(DataNotFoundError, match=r"data\.download=false"):
        ImageDataModule(data_dir, download=False).check_available()
    with pytest.raises(DataNotFoundError, match=r"data\.source=official"):
        ListOpsDataModule(data_dir, source="official").check_available()
    # Generated, or downloaded when absent: available.
    ListOpsDataModule(data_dir).check_available()
    TextDataModule(data_dir, download=True).check_available()
    assert not data_dir.exists()  # nothing was written


def test_a_cached_task_is_available_without_its_files(tmp_path: Path) -> None:
    write_aan_release(tmp_path)
    RetrievalDataModule(tmp_path, max_length=64).prepare_data()
    shutil.rmtree(tmp_path / "lra_release")
    RetrievalDataModule(tmp_path, max_length=64).check_available()
    with pytest.raises(DataNotFoundError):  # another setting needs the files again
        RetrievalDataModule(tmp_path, max_length=32).check_available()


def test_importing_the_data_package_leaves_warning_filters_alone() -> None:
    # The libraries it imports install filters of their own; those are loaded first.
    code = (
        "import warnings, lightning, numpy, PIL.Image, torch, torchdata.stateful_dataloader; "
        "before = list(warnings.filters); import linarena.data; "
        "assert warnings.filters == before, 'importing linarena.data changed the warning filters'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_training_loader_is_built_without_torchdata_noise(tmp_path: Path) -> None:
    datamodule = MQARDataModule(tmp_path, max_length=16, num_pairs=2, vocab_size=16, num_train=4,
                                num_val=2, num_test=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        datamodule.train_dataloader()
    assert not [w for w in caught if "set_vital" in str(w.message)]
