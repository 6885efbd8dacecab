"""The commands a run prints for the user to run, shell-quoted (shlex): pasted into a shell, a
folder with spaces, quotes or brackets and an override such as model.pattern=[a,b] reach
train.py or wandb as they were. Nothing here loads torch (linarena.run_lock uses it)."""

from __future__ import annotations

import shlex
from pathlib import Path


def train_command(*args: str) -> str:
    """`python train.py <args>`, each argument quoted where a shell would change it."""
    return shlex.join(["python", "train.py", *args])


def resume_command(output_dir: Path | str, *overrides: str) -> str:
    """The command that resumes the run in `output_dir` from its last checkpoint, with
    `overrides` (e.g. a lower optim.lr)."""
    return train_command("ckpt_path=last", f"hydra.run.dir={output_dir}", *overrides)


def sync_command(folder: Path | str, pattern: str = "") -> str:
    """`wandb sync <folder><pattern>`: the folder quoted, `pattern` (e.g. "/offline-run-*-<id>",
    no quotes or spaces) left for the shell to expand."""
    return f"wandb sync {shlex.quote(str(folder))}{pattern}"
