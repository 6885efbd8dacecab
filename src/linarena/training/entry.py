"""What train.py calls: runs one job and turns known failures into one clear message."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from linarena.commands import resume_command
from linarena.errors import LinarenaError, NonFiniteStateError
from linarena.run_lock import (
    LOCK_FILE,
    OWNER_FILE,
    REFUSED_HYDRA_SUBDIR,
    RunFolderBusyError,
    RunFolderTakenError,
    run_folder_lock,
)
from linarena.training.build import LOGGER_FILES, logger_nodes
from linarena.training.environment import normalise_environment, os_error_message, warn_if_busy
from linarena.training.launch import hydra_context
from linarena.training.resume import clean_checkpoint_step
from linarena.training.run import train
from linarena.training.search_space import all_trials_diverged
from linarena.training.signals import RunStopped
from linarena.training.stages import is_two_stage, train_stages
from linarena.training.sweep_resume import FINISHED, RESTART, RESUME, job_state, skip_finished
from linarena.training.sweep_start import OPTUNA_SWEEPER

# OS errors whose cause is the machine, not the code: reported in one line.
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
# Failures after which a new run's folder is kept: it is another process's, or it trained.
KEEP_FOLDER_ON = (RunFolderBusyError, RunFolderTakenError, NonFiniteStateError, RunStopped)
# What a new run writes before it trains (Hydra's files and log, the lock; the loggers' first
# files are named by their YAML files, `_files_`): a failed new run whose folder holds nothing
# else leaves no folder behind.
SETUP_FILES = {".hydra", LOCK_FILE, OWNER_FILE}


def explain(err: BaseException, output_dir: Path) -> str:
    """The message for a user-facing failure, with the way forward for a diverged run."""
    message = str(err)
    if isinstance(err, NonFiniteStateError):
        lower = f"optim.lr={err.lr / 10:g}" if err.lr else "a lower optim.lr"
        last = output_dir / "checkpoints" / "last.ckpt"
        step = clean_checkpoint_step(last)
        if step is not None:
            kept = (
                f"The last clean checkpoint (weights and optimizer state finite) is "
                f"{last}, step {step}. Resume from it with a lower learning rate: "
                f"{resume_command(output_dir, *[lower] if err.lr else [])} (a longer "
                "optim.warmup_steps or trainer.precision=32-true may help too)."
            )
        elif last.is_file():
            kept = (
                f"{last} is not clean (it holds non-finite values or cannot be read): start "
                f"again in a new folder with {lower}, a longer optim.warmup_steps or "
                "trainer.precision=32-true."
            )
        else:
            kept = (
                f"No checkpoint had been saved yet: start again with {lower}, a longer "
                "optim.warmup_steps or trainer.precision=32-true."
            )
        message += f" {kept}"
    return message


def remove_if_unused(output_dir: Path, cfg: DictConfig) -> None:
    """Remove the folder of a new run that failed before writing anything of its own."""
    if not output_dir.is_dir():
        return
    setup = SETUP_FILES | {str(name) for node in logger_nodes(cfg).values()
                           for name in node.get(LOGGER_FILES) or ()}
    entries = list(output_dir.iterdir())
    if all(e.name in setup or e.suffix == ".log" for e in entries):
        shutil.rmtree(output_dir, ignore_errors=True)


def run_job(cfg: DictConfig) -> float:
    """train(cfg), or train_stages(cfg) for both stages of self-pretraining, while owning the run
    folder, with user-facing failures printed as one message, then exit status 1 (or the
    signal's status for a run stopped by SIGTERM/SIGINT).

    Config and data errors end a multirun too (the other jobs would mostly hit the same error).
    A diverged run (non-finite weights) in a multirun is re-raised instead, so Hydra marks that
    job failed and runs the others: the basic sweeper reports the failure at the end, the Optuna
    sweeper records a failed trial and goes on (hparams_search/optuna.yaml: max_failure_rate),
    unless it was the search's last and every trial diverged (every_trial_diverged).
    Set HYDRA_FULL_ERROR=1 for the full traceback instead.
    """
    if logging.getLogger().handlers:
        # Hydra logs to the console and the job's log file; the handler `import lightning` adds
        # would print every Lightning message a second time.
        for handler in list(logging.getLogger("lightning").handlers):
            logging.getLogger("lightning").removeHandler(handler)
    output_dir = Path(cfg.paths.output_dir).resolve()
    # A sweep run again (the same command and hydra.sweep.dir) continues its jobs' runs.
    state = job_state(output_dir) if cfg.get("ckpt_path") is None else None
    if state == FINISHED:
        shutil.rmtree(output_dir / REFUSED_HYDRA_SUBDIR, ignore_errors=True)
        return skip_finished(output_dir)
    if state == RESUME:
        with open_dict(cfg):
            cfg.ckpt_path = "last"
    try:
        normalise_environment()
        new_run = cfg.get("ckpt_path") is None and state != RESTART
        with run_folder_lock(output_dir, new_run=new_run):
            # Once the folder is this run's (a refused run writes nothing into another's log),
            # before anything is timed: tokens/s means little on a busy machine.
            warn_if_busy()
            return train_stages(cfg) if is_two_stage(cfg) else train(cfg)
    except (LinarenaError, OSError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if isinstance(err, LinarenaError):
            message, exit_code = explain(err, output_dir), err.exit_code
        elif err.errno in MACHINE_ERRNOS:
            message, exit_code = os_error_message(err), 1
        else:
            raise
        if not isinstance(err, KEEP_FOLDER_ON):
            remove_if_unused(output_dir, cfg)
        # Where train.py sent Hydra's files of a new run aimed at a folder holding a run.
        shutil.rmtree(output_dir / REFUSED_HYDRA_SUBDIR, ignore_errors=True)
        # A stop the user asked for (Ctrl+C, SIGTERM from a scheduler) is not an error.
        heading = "Stopped" if isinstance(err, RunStopped) else "Error"
        print(f"\n{heading}: {message}", file=sys.stderr, flush=True)
        if isinstance(err, NonFiniteStateError) and hydra_context()[0]:
            ended = every_trial_diverged(err.lr)
            if ended is None:
                raise
            print(f"\nError: {ended}", file=sys.stderr, flush=True)
        sys.exit(exit_code)


# The learning rates of this process's Optuna trials that diverged: when all n_trials have, the
# search ends with advice instead of the sweeper's "No trials are completed yet" traceback.
# Counted per process, so under a launcher that runs each trial in a process of its own
# (submitit) only a search of one trial ends so.
_diverged_lrs: list[float | None] = []


def every_trial_diverged(lr: float | None) -> str | None:
    """Records a diverged job (its learning rate `lr`) if it is a trial of an Optuna search; the
    message that ends the search when every trial of it has diverged, else None."""
    sweeper = HydraConfig.get().sweeper
    if sweeper.get("_target_") != OPTUNA_SWEEPER:
        return None
    _diverged_lrs.append(lr)
    if len(_diverged_lrs) < int(sweeper.n_trials):
        return None
    return all_trials_diverged(_diverged_lrs)
