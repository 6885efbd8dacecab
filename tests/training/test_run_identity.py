"""A checkpoint knows what made it, and a folder holds one run (train.py, tiny generated ListOps).

Written first against 5f661cc, where each of these runs trained without a word: an elu run
continued from a softmax checkpoint and filed as elu; a new run in a finished run's folder
overwrote its summary.json and last.ckpt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.training import run_train

from linarena.errors import CheckpointError
from linarena.training.checkpoint_identity import IDENTITY_KEY, check_identity, identity_changes
from linarena.training.resume import MUTABLE

SMOKE = ["debug=smoke", "logger=csv", "trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def softmax_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A finished smoke run of softmax attention."""
    tmp = tmp_path_factory.mktemp("softmax")
    run = tmp / "run"
    done = run_train([*SMOKE, "attention=softmax", f"hydra.run.dir={run}"], tmp, data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_every_checkpoint_stores_the_run_that_made_it(softmax_run: Path) -> None:
    last = torch.load(softmax_run / "checkpoints" / "last.ckpt", weights_only=True)
    identity = last[IDENTITY_KEY]
    assert identity["attention_name"] == "softmax"
    assert identity["task_name"] == "listops_small"
    assert identity["seed"] == 1 and identity["model.d_model"] == 32
    assert "code_version" in identity
    assert not any(key.startswith("data.data_dir") for key in identity)  # a machine's choice


def test_another_attention_cannot_continue_a_checkpoint(
    tmp_path: Path, data_dir: Path, softmax_run: Path
) -> None:
    checkpoint = softmax_run / "checkpoints" / "last.ckpt"
    refused = run_train([*SMOKE, "attention=elu", "trainer.max_steps=8", f"ckpt_path={checkpoint}",
                         f"hydra.run.dir={tmp_path / 'elu'}"], tmp_path, data_dir)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "attention_name: 'softmax' there, 'elu' here" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (tmp_path / "elu" / "summary.json").exists()


def test_a_finished_run_of_another_attention_cannot_continue_and_is_named(
    tmp_path: Path, data_dir: Path, softmax_run: Path
) -> None:
    """A finished run's checkpoint (nothing left to train) was reported as "the run in <this
    run's new folder> already finished", with no check that it was of this attention."""
    checkpoint = softmax_run / "checkpoints" / "last.ckpt"
    refused = run_train([*SMOKE, "attention=elu", f"ckpt_path={checkpoint}",
                         f"hydra.run.dir={tmp_path / 'elu'}"], tmp_path, data_dir)
    assert refused.returncode == 1, refused.stdout[-3000:]
    assert "attention_name: 'softmax' there, 'elu' here" in refused.stderr
    assert f"hydra.run.dir={softmax_run}" in refused.stderr  # the way to resume it
    finished = run_train([*SMOKE, "attention=softmax", f"ckpt_path={checkpoint}",
                          f"hydra.run.dir={tmp_path / 'again'}"], tmp_path, data_dir)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"The run in {softmax_run} already finished" in finished.stdout


@pytest.mark.slow
def test_a_foreign_last_ckpt_in_a_run_folder_is_refused(
    tmp_path: Path, data_dir: Path, softmax_run: Path
) -> None:
    elu = tmp_path / "elu"
    first = run_train([*SMOKE, "attention=elu", f"hydra.run.dir={elu}"], tmp_path, data_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    mixed = tmp_path / "mixed"
    shutil.copytree(softmax_run, mixed)
    (mixed / "summary.json").unlink()
    shutil.copy(elu / "checkpoints" / "last.ckpt", mixed / "checkpoints" / "last.ckpt")
    refused = run_train(["ckpt_path=last", f"hydra.run.dir={mixed}", "trainer.max_steps=8"],
                        tmp_path, data_dir)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "'elu' there, 'softmax' here" in refused.stderr


@pytest.mark.slow
def test_an_allowed_change_is_recorded_in_the_resume(
    tmp_path: Path, data_dir: Path, softmax_run: Path
) -> None:
    checkpoint = softmax_run / "checkpoints" / "last.ckpt"
    run = tmp_path / "longer"
    done = run_train([*SMOKE, "attention=softmax", "trainer.max_steps=6", "optim.lr=0.0005",
                      f"ckpt_path={checkpoint}", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    changes = json.loads((run / "summary.json").read_text())["resumes"][0]["changes"]
    assert changes["trainer.max_steps"]["after"] == 6
    assert changes["optim.lr"]["after"] == 0.0005


def test_identity_changes_split_refused_from_allowed() -> None:
    stored = {"attention_name": "softmax", "optim.lr": 1e-3, "code_version": "a", "model.x": 1}
    current = {"attention_name": "elu", "optim.lr": 5e-4, "code_version": "b", "model.x": 1}
    refused, allowed = identity_changes(stored, current, MUTABLE)
    assert refused == {"attention_name": ("softmax", "elu")}
    assert allowed == {"optim.lr": (1e-3, 5e-4), "code_version": ("a", "b")}
    with pytest.raises(CheckpointError, match="attention_name"):
        check_identity("x.ckpt", {IDENTITY_KEY: stored}, current, MUTABLE)
    # A checkpoint written before identities were stored: nothing to compare (a note is logged).
    assert check_identity("x.ckpt", {}, current, MUTABLE) is None


@pytest.mark.parametrize("state", ["finished", "interrupted"])
def test_a_new_run_in_a_folder_holding_a_run_is_refused_and_changes_nothing(
    tmp_path: Path, data_dir: Path, softmax_run: Path, state: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(softmax_run, run)
    if state == "interrupted":  # as after kill -9: no summary, the owner record left behind
        (run / "summary.json").unlink()
        (run / ".run_owner.json").write_text(json.dumps(
            {"pid": 999999, "host": "elsewhere", "started": "then", "command": "train.py"}))
    before = snapshot(run)
    refused = run_train([*SMOKE, "attention=elu", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "already holds a run" in refused.stderr
    assert f"ckpt_path=last hydra.run.dir={run}" in refused.stderr
    assert snapshot(run) == before
