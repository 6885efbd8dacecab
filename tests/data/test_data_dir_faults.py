"""The data folder when the machine is in the way: LINARENA_DATA_DIR set but empty, a full disk,
a read-only folder. Each ends in one message naming the folder actually written and what to do,
from train.py's run_job and from scripts/prepare_data.py alike."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.training import REPO, compose_config
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate

from linarena.data import DataConfigError, DataDirError, MQARDataModule
from linarena.training.entry import run_job


@pytest.fixture(autouse=True)
def reset_hydra():
    yield
    HydraConfig.instance().cfg = None


# Tiny generated data (debug=smoke's MQAR sizes).
MQAR = ["data=mqar", "data.max_length=64", "data.num_pairs=4", "data.vocab_size=512",
        "data.num_train=64", "data.num_val=16", "data.num_test=16"]


def mqar(data_dir: Path) -> MQARDataModule:
    return MQARDataModule(data_dir, max_length=64, num_pairs=4, vocab_size=512, num_train=64,
                          num_val=16, num_test=16)


def full_disk(obj: object, handle: object, *args: object, **kwargs: object) -> None:
    """torch.save on a full disk: the write fails with ENOSPC, and names no file."""
    raise OSError(errno.ENOSPC, "No space left on device")


def test_an_empty_linarena_data_dir_is_refused_not_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LINARENA_DATA_DIR", "")
    monkeypatch.chdir(tmp_path)
    cfg = compose_config(["data=mqar"])
    assert cfg.paths.data_dir == ""  # what OmegaConf makes of an empty variable
    with pytest.raises(InstantiationException) as error:
        instantiate(cfg.data)
    assert isinstance(error.value.__cause__, DataConfigError)
    assert "data.data_dir is empty" in str(error.value) and "LINARENA_DATA_DIR" in str(error.value)
    assert not list(tmp_path.iterdir())


def test_a_full_data_disk_names_the_data_folder_and_its_free_space(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    asked = []

    def disk_usage(path: Path) -> shutil._ntuple_diskusage:
        asked.append(Path(path))
        return shutil._ntuple_diskusage(10**12, 10**12 - 1234, 1234)

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    with pytest.raises(DataDirError) as error:
        mqar(data_dir).setup()
    message = str(error.value)
    # The write names no file: the data folder's disk, not the working directory's.
    assert asked == [data_dir]
    assert message.startswith(f"Cannot write the data of data=mqar in {data_dir}: ")
    assert "1.2 KB free" in message and "LINARENA_DATA_DIR" in message and "\n" not in message


def test_a_run_on_a_full_data_disk_reports_the_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setattr(torch, "save", full_disk)
    cfg = compose_config(["debug=smoke", "logger=none", "data=mqar", f"paths.data_dir={data_dir}"],
                         output_dir=tmp_path / "run")
    with pytest.raises(SystemExit):
        run_job(cfg)
    message = capsys.readouterr().err.strip()
    assert f"in {data_dir}: no space left on the device" in message
    assert f"free on the disk of {data_dir}." in message
    assert str(Path.cwd()) not in message.replace(str(tmp_path), "")


def test_a_read_only_data_folder_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def read_only(obj: object, handle: object, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", handle.name)

    monkeypatch.setattr(torch, "save", read_only)
    with pytest.raises(DataDirError, match=r"in .*data/cache: it is on a read-only file system"):
        mqar(tmp_path / "data").setup()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_data_folder_without_write_permission_is_named(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o555)
    with pytest.raises(DataDirError, match=r"Permission denied for .*data/cache"):
        mqar(data_dir).setup()


# scripts/prepare_data.py in a child process whose torch.save fails as the folder would.
PREPARE = """
import errno, os, runpy, sys, torch
code = getattr(errno, os.environ["FAIL_WITH"])
def fail(obj, handle, *args, **kwargs):
    named = code != errno.ENOSPC  # a failed write names no file; a failed open does
    raise OSError(code, os.strerror(code), handle.name if named else None)
torch.save = fail
sys.argv = ["prepare_data.py", *sys.argv[1:]]
runpy.run_path(os.environ["PREPARE_SCRIPT"], run_name="__main__")
"""


def prepare(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    script = str(REPO / "scripts" / "prepare_data.py")
    merged = {**os.environ, "LINARENA_ROOT": str(REPO), "PREPARE_SCRIPT": script, **env}
    return subprocess.run(
        [sys.executable, "-c", PREPARE, *MQAR, f"hydra.run.dir={tmp_path / 'log'}", *args],
        capture_output=True, text=True, env=merged, cwd=tmp_path, timeout=300,
    )


@pytest.mark.parametrize(("fail_with", "folder", "expected"), [
    ("ENOSPC", "data", "no space left on the device (or over quota)"),
    ("EROFS", "data/cache", "it is on a read-only file system"),  # the file is named
])
def test_prepare_data_on_a_full_or_read_only_folder_prints_one_line(
    tmp_path: Path, fail_with: str, folder: str, expected: str
) -> None:
    data_dir = tmp_path / "data"
    done = prepare(tmp_path, {"FAIL_WITH": fail_with}, f"paths.data_dir={data_dir}")
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert f"in {tmp_path / folder}: {expected}" in errors[0]
    assert "paths.data_dir (or LINARENA_DATA_DIR)" in errors[0]


def test_prepare_data_treats_an_empty_linarena_data_dir_as_unset(tmp_path: Path) -> None:
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    done = prepare(work, {"FAIL_WITH": "ENOSPC", "LINARENA_DATA_DIR": "",
                          "LINARENA_ROOT": str(root)})
    # The data folder is <root>/data, as with the variable unset; nothing lands in the cwd.
    assert f"in {root / 'data'}: no space left" in done.stderr, done.stderr[-3000:]
    assert sorted(p.name for p in work.iterdir()) == ["log"]


def test_train_py_treats_an_empty_data_or_root_variable_as_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """train.py calls normalise_environment before Hydra composes: an empty LINARENA_DATA_DIR
    then gives the default data folder, not the working directory."""
    from linarena.training.environment import normalise_environment

    monkeypatch.setenv("LINARENA_DATA_DIR", "")
    monkeypatch.setenv("LINARENA_ROOT", "")
    normalise_environment()
    assert "LINARENA_DATA_DIR" not in os.environ and "LINARENA_ROOT" not in os.environ


def failing_writer(code: int) -> object:
    """torch.save whose writes fail with `code` after the first one: the OSError is raised inside
    torch's writer, which reports it as a RuntimeError ("unexpected pos")."""
    save = torch.save

    class Handle:
        def __init__(self, handle: object) -> None:
            self.handle, self.writes = handle, 0

        def write(self, data: bytes) -> int:
            self.writes += 1
            if self.writes > 1:
                raise OSError(code, os.strerror(code))
            return self.handle.write(data)

        def flush(self) -> None:
            self.handle.flush()

    return lambda obj, handle, *args, **kwargs: save(obj, Handle(handle), *args, **kwargs)


def left_in(folder: Path) -> list[str]:
    """The files in `folder` but the build locks."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


@pytest.mark.parametrize(("code", "expected"), [
    (errno.ENOSPC, r"no space left on the device \(or over quota\) writing its cache file "
                   r"{cache}, .* free on the disk of .*Free some space there, or set "
                   r"paths\.data_dir"),
    (errno.EFBIG, r"Cannot write {cache} for data=mqar: the file would exceed this process's "
                  r"file-size limit \(ulimit -f\)\. Raise the limit"),
], ids=["ENOSPC", "EFBIG"])
def test_a_cache_write_failing_inside_torch_names_the_cache_and_leaves_no_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: int, expected: str
) -> None:
    dm = mqar(tmp_path / "data")
    monkeypatch.setattr(torch, "save", failing_writer(code))
    with pytest.raises(DataDirError, match=expected.format(cache=dm.cache_path)) as error:
        dm.setup()
    assert "\n" not in str(error.value)
    assert left_in(dm.cache_path.parent) == []


def test_a_folder_where_the_cache_file_goes_is_named_before_the_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dm = mqar(tmp_path / "data")
    (dm.cache_path / "inside").mkdir(parents=True)
    monkeypatch.setattr(MQARDataModule, "build", lambda self: pytest.fail("built anyway"))
    with pytest.raises(DataDirError, match=rf"{dm.cache_path} is a folder where data=mqar needs a "
                                           r"file\. Remove that folder, or set paths\.data_dir"
                       ) as error:
        dm.setup()
    assert "\n" not in str(error.value)
    assert left_in(dm.cache_path.parent) == [dm.cache_path.name]
