"""Completing an interrupted multirun: the same `python train.py -m ...` command with the same
hydra.sweep.dir skips the jobs that finished (their summary.json), resumes those stopped after a
checkpoint (as ckpt_path=last would), starts again those stopped before their first one, and
trains the jobs never reached. A stopped job prints that command (`sweep_command`).

Only for sweeps of Hydra's basic sweeper, whose jobs are the same on every run of the command:
an Optuna search samples new trials. A job folder holding a run of other overrides (the command
changed) is refused as before (linarena.run_lock), so two sweeps never mix their runs.
"""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from linarena.commands import train_command
from linarena.metrics import VAL_ACC_BEST
from linarena.run_lock import existing_run
from linarena.training.summary import SUMMARY_FILE, read_summary
from linarena.training.sweep_report import BASIC_SWEEPER

# What a job of a sweep run again does with the run already in its folder.
FINISHED, RESUME, RESTART = "finished", "resume", "restart"
MULTIRUN_FILE = "multirun.yaml"
# Hydra overrides the command gets back otherwise: the mode (-m) and the sweep folder (absolute).
OWN_HYDRA_OVERRIDES = ("hydra.mode=", "hydra.sweep.dir=")


def _basic_sweep() -> DictConfig | None:
    """Hydra's config of this job when it is a job of a basic sweeper's multirun, else None."""
    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN or hydra_cfg.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    return hydra_cfg


def job_state(output_dir: Path) -> str | None:
    """FINISHED, RESUME or RESTART for a multirun job whose folder holds the run of an earlier
    start of the same job (the same overrides); None for any other job or folder."""
    hydra_cfg = _basic_sweep()
    if hydra_cfg is None or not existing_run(output_dir):
        return None
    saved = output_dir / ".hydra" / "overrides.yaml"
    if not saved.is_file() or list(OmegaConf.load(saved)) != list(hydra_cfg.overrides.task):
        return None
    if (output_dir / SUMMARY_FILE).is_file():
        return FINISHED
    if (output_dir / "checkpoints" / "last.ckpt").is_file():
        return RESUME
    return RESTART


def skip_finished(output_dir: Path) -> float:
    """Say that the job's run already finished; its val/acc_best (nan if it diverged)."""
    print(f"Job already finished in {output_dir} (its {SUMMARY_FILE}): skipped. Remove that "
          "folder to train the job again.", flush=True)
    value = (read_summary(output_dir) or {}).get("metrics", {}).get(VAL_ACC_BEST.key)
    return float("nan") if value is None else float(value)


def sweep_command() -> str | None:
    """The command that completes this job's sweep (from the sweep folder's multirun.yaml); None
    outside a basic sweeper's multirun."""
    hydra_cfg = _basic_sweep()
    if hydra_cfg is None:
        return None
    sweep_dir = Path(str(hydra_cfg.sweep.dir)).resolve()
    path = sweep_dir / MULTIRUN_FILE
    if not path.is_file():
        return None
    overrides = OmegaConf.load(path).hydra.overrides
    hydra = [str(o) for o in overrides.hydra if not str(o).startswith(OWN_HYDRA_OVERRIDES)]
    return train_command("-m", *map(str, overrides.task), *hydra, f"hydra.sweep.dir={sweep_dir}")
