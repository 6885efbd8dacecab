"""One training process per run folder: a second one is refused with the owner's name, a lock
left by a dead process is taken over (the other process is a small script holding the lock,
not a training)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT as REPO

from linarena.run_lock import (
    LOCK_FILE,
    OWNER_FILE,
    RunFolderBusyError,
    RunFolderTakenError,
    run_folder_lock,
)

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from linarena.run_lock import run_folder_lock
    with run_folder_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(120)
    """
)


def start_holder(folder: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for rank_variable in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        env.pop(rank_variable, None)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_process_is_refused_with_the_owners_name(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = start_holder(folder)
    try:
        with pytest.raises(RunFolderBusyError) as refused, run_folder_lock(folder):
            pytest.fail("the folder was taken while another process trained in it")
        message = str(refused.value)
        assert f"pid {holder.pid} on host" in message and "started 20" in message
        assert f"kill {holder.pid}" in message and "hydra.run.dir" in message
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_note(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "run"
    holder = start_holder(folder)
    holder.kill()  # kill -9: no cleanup, the owner record stays
    holder.wait()
    assert json.loads((folder / OWNER_FILE).read_text())["pid"] == holder.pid
    with caplog.at_level(logging.WARNING), run_folder_lock(folder):
        assert json.loads((folder / OWNER_FILE).read_text())["pid"] == os.getpid()
    assert f"pid {holder.pid}" in caplog.text and "no longer running" in caplog.text
    assert not (folder / OWNER_FILE).exists()  # released
    assert not (folder / LOCK_FILE).exists()  # and no lock file left behind


def test_a_new_run_is_refused_where_a_killed_run_left_its_owner_record(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = start_holder(folder)
    holder.kill()
    holder.wait()
    with pytest.raises(RunFolderTakenError, match="ckpt_path=last"), run_folder_lock(
        folder, new_run=True
    ):
        pytest.fail("a new run took the folder of an interrupted one")
    assert json.loads((folder / OWNER_FILE).read_text())["pid"] == holder.pid  # untouched


def test_the_owner_puts_back_the_hydra_files_a_refused_process_overwrote(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("owner's config\n")
    with run_folder_lock(folder):
        # What Hydra does in a second process before it can ask for the lock.
        (folder / ".hydra" / "config.yaml").write_text("intruder's config\n")
        (folder / ".hydra" / "resume").mkdir()
        (folder / ".hydra" / "resume" / "config.yaml").write_text("intruder's resume\n")
    assert (folder / ".hydra" / "config.yaml").read_text() == "owner's config\n"
    assert not (folder / ".hydra" / "resume" / "config.yaml").exists()


def test_train_py_refuses_a_folder_another_process_trains_in(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from helpers.training import compose_config

    from linarena.training.entry import run_job

    folder = tmp_path / "run"
    holder = start_holder(folder)
    try:
        cfg = compose_config(["debug=smoke", "logger=none"], output_dir=folder)
        with pytest.raises(SystemExit) as exit_info:
            run_job(cfg)
        assert exit_info.value.code == 1
        message = capsys.readouterr().err
        assert f"in use: pid {holder.pid}" in message and "Traceback" not in message
        assert folder.is_dir()  # the owner's folder is left alone
    finally:
        holder.kill()
        holder.wait()
