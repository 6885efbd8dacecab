"""Hydra callbacks (conf/hydra/default.yaml: hydra.callbacks) that check, before anything is
launched, what Hydra itself would otherwise fail on with a traceback: a multirun's launcher that
cannot work on this machine (hydra/launcher=slurm off a Slurm cluster ends in one line that
suggests hydra/launcher=submitit_local instead of submitit's 25-line traceback, "Could not detect
srun"), and an output folder that cannot be written (read-only, under a file, a full disk). Kept
free of torch so that they load at once."""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from linarena.training.environment import os_error_message

SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def launcher_problem(launcher_target: str | None) -> str | None:
    """Why the launcher cannot run here, as a one-line message; None when it can."""
    if launcher_target == SLURM_LAUNCHER and shutil.which("srun") is None:
        return (
            "hydra/launcher=slurm: there is no Slurm on this machine (no `srun` command). Run "
            "the command on your cluster's login node, or use hydra/launcher=submitit_local to "
            "run the jobs here."
        )
    return None


class CheckLauncher(Callback):
    """Ends the process with launcher_problem's message (exit status 1) before the launch."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        problem = launcher_problem(config.hydra.launcher.get("_target_"))
        if problem is not None:
            print(f"Error: {problem}", file=sys.stderr, flush=True)
            sys.exit(1)


def folder_problem(folder: Path) -> str | None:
    """Why `folder` cannot hold a run's files, as a one-line message; None when it can (it is
    created, and a file is written into it and removed)."""
    probe = folder / f".write-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"0")
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (folder, *folder.parents) if p.exists()), folder)
        return (
            f"The output folder {folder} cannot be made: {blocker} is a file, not a folder. Point "
            "hydra.run.dir (or hydra.sweep.dir) at a folder path."
        )
    except OSError as err:
        err.filename = err.filename or str(probe)
        return os_error_message(err)
    return None


class CheckOutputFolder(Callback):
    """Ends the process with folder_problem's message (exit status 1) before Hydra creates the
    run's folder (single run) or the sweep's folder (multirun)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(Path(config.hydra.sweep.dir))

    @staticmethod
    def _check(folder: Path) -> None:
        problem = folder_problem(folder.absolute())
        if problem is not None:
            print(f"Error: {problem}", file=sys.stderr, flush=True)
            sys.exit(1)
