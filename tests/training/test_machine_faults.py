"""A full disk, a read-only folder, a run folder under a file: one line, not a traceback (at
5f661cc a full disk gave torch's chained "inline_container.cc" RuntimeErrors and the folders
Hydra could not make gave raw OSErrors)."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest
import torch
from helpers.training import run_train

from linarena.errors import ResourceError
from linarena.launch_check import folder_problem
from linarena.training import checkpoint_io
from linarena.training.checkpoint_io import AtomicCheckpointIO


class FullDisk(io.BytesIO):
    """A file on a disk with `room` bytes left."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, data: bytes) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_checkpoint_on_a_full_disk_is_one_message_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint_io, "open", lambda path, mode: FullDisk(1000), raising=False)
    target = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(ResourceError,
                       match=r"No space left .*/last\.ckpt: about 40\.\d KB was needed"):
        AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(10_000)}, target)
    assert list(target.parent.iterdir()) == []


def test_other_checkpoint_errors_are_not_disguised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(checkpoint: object, file: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(checkpoint_io.torch, "save", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        AtomicCheckpointIO().save_checkpoint({}, tmp_path / "last.ckpt")


def test_output_folders_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a_file").write_text("")
    under_file = folder_problem(tmp_path / "a_file" / "run")
    assert under_file is not None and "a_file is a file, not a folder" in under_file
    assert folder_problem(tmp_path / "fine" / "run") is None

    def read_only(self: Path, data: bytes) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "write_bytes", read_only)
    message = folder_problem(tmp_path / "ro")
    assert message is not None and "read-only file system" in message
    assert "hydra.run.dir" in message


def test_train_py_under_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    result = run_train(["debug=smoke", f"hydra.run.dir={tmp_path / 'a_file' / 'run'}"], tmp_path,
                       tmp_path / "data")
    assert result.returncode == 1
    assert "is a file, not a folder" in result.stderr and "Traceback" not in result.stderr
