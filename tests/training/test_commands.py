"""The commands a run prints for the user to run (resume, wandb sync) are shell-quoted: pasted
into a shell, a folder with spaces, quotes or brackets reaches train.py or wandb as it was."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from linarena.errors import NonFiniteStateError
from linarena.run_lock import RunFolderTakenError, run_folder_lock
from linarena.training.entry import explain
from linarena.training.signals import SaveOnSignal
from linarena.training.wandb_run import location_message

# A run folder a shell would split or expand unquoted.
ODD = "my runs/it's [a,b] $HOME"


def printed(message: str, program: str) -> list[str]:
    """The words of the `program ...` command in a message, as a shell would split them (the
    command ends at the end of the line or at ` (`, which starts a remark)."""
    found = re.search(rf"({program} .*?)(?: \(|\.?$)", message, re.MULTILINE)
    assert found, message
    return shlex.split(found.group(1))


def resume_words(folder: Path, *overrides: str) -> list[str]:
    return ["python", "train.py", "ckpt_path=last", f"hydra.run.dir={folder}", *overrides]


def test_the_resume_command_of_a_stopped_run_reads_back(tmp_path: Path) -> None:
    run = tmp_path / ODD
    callback = SaveOnSignal(run / "checkpoints")
    callback.signal_name, callback.saved = "SIGTERM", True
    message = str(callback.stopped(SimpleNamespace(global_step=3), run))
    assert printed(message, "python train.py") == resume_words(run)


def test_the_resume_command_of_a_diverged_run_reads_back(tmp_path: Path) -> None:
    run = tmp_path / ODD
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {"model.w": torch.zeros(2)}, "global_step": 2, "loops": {},
                "optimizer_states": []}, run / "checkpoints" / "last.ckpt")
    message = explain(NonFiniteStateError("diverged", lr=0.001), run)
    assert printed(message, "python train.py") == resume_words(run, "optim.lr=0.0001")


def test_the_resume_command_of_a_refused_new_run_reads_back(tmp_path: Path) -> None:
    run = tmp_path / ODD
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({}))
    with pytest.raises(RunFolderTakenError) as refused, run_folder_lock(run, new_run=True):
        pass
    assert printed(str(refused.value), "python train.py") == resume_words(run)


def test_the_wandb_sync_command_reads_back(tmp_path: Path) -> None:
    folder = tmp_path / ODD / "wandb" / "offline-run-1-abc"
    info = {"id": "abc", "dir": str(folder), "url": None, "mode": "offline"}
    assert printed(location_message(info), "wandb sync") == ["wandb", "sync", str(folder)]
    # After a resume: every part of the run, by a pattern the shell expands.
    (folder.parent / "offline-run-2-abc").mkdir(parents=True)
    folder.mkdir()
    assert printed(location_message(info), "wandb sync") == [
        "wandb", "sync", f"{folder.parent}/offline-run-*-abc"]
