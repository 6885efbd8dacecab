"""A Hydra callback (conf/hydra/default.yaml: hydra.callbacks) that checks, before a multirun
launches anything, that its launcher can work on this machine: hydra/launcher=slurm off a Slurm
cluster ends in one line that suggests hydra/launcher=submitit_local instead of submitit's
25-line traceback ("Could not detect srun"). Kept free of torch so that it loads at once."""

from __future__ import annotations

import shutil
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

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
