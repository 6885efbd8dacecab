"""A Hydra callback (conf/hydra/default.yaml: hydra.callbacks) for the start of a multirun:

- an Optuna search that cannot run (n_trials or n_jobs below 1, a SQL storage that Optuna 2
  cannot use with SQLAlchemy 2, a search range it cannot sample: search_space.py) ends at once
  with one line, before the study is created;
- an Optuna search says in one line how many trials it runs, what it maximises, and that its
  in-memory study cannot be resumed; Optuna's own log lines lose their colour codes when they
  go to a file (colorlog writes them whatever the stream);
- a sweep none of whose jobs left anything (refused by a config error before training, or
  stopped before its first job) leaves no sweep folder: at exit, a sweep folder that was absent
  or empty when the sweep started and holds nothing but Hydra's multirun.yaml is removed.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from linarena.training.search_space import search_space_problem

OPTUNA_SWEEPER = "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
# What Hydra's basic sweeper writes in the sweep folder before its first job starts.
SWEEP_SETUP_FILES = {"multirun.yaml"}
# Optuna's own line format, without colorlog's colour codes.
OPTUNA_LOG_FORMAT = "[%(levelname)1.1s %(asctime)s] %(message)s"
PLAIN_HANDLER_NAME = "linarena.optuna_plain"


def optuna_problem(sweeper: DictConfig) -> str | None:
    """Why an Optuna search cannot run as configured, in one line; None when it can."""
    if int(sweeper.n_trials) < 1:
        return (f"hydra.sweeper.n_trials={sweeper.n_trials}: an Optuna search needs at least one "
                "trial (n_trials must be >= 1).")
    if int(sweeper.n_jobs) < 1:
        return (f"hydra.sweeper.n_jobs={sweeper.n_jobs}: the trials run n_jobs at a time "
                "(n_jobs must be >= 1).")
    if sweeper.storage is not None:
        optuna_major, sqlalchemy = int(version("optuna").split(".")[0]), version("sqlalchemy")
        if optuna_major < 3 and int(sqlalchemy.split(".")[0]) >= 2:
            return (f"hydra.sweeper.storage={sweeper.storage}: hydra-optuna-sweeper needs "
                    "optuna < 3, whose SQL storage does not work with the installed SQLAlchemy "
                    f"{sqlalchemy}; leave hydra.sweeper.storage=null (in memory).")
    return None


def optuna_notice(sweeper: DictConfig) -> str:
    """The line an Optuna search starts with: its size, its objective, and what a stop loses."""
    direction = str(sweeper.direction)
    goal = "minimising" if "minimize" in direction else "maximising"
    where = ("in memory, so an interrupted search cannot be resumed (running the command again "
             "starts a new one)" if sweeper.storage is None
             else f"in {sweeper.storage} (study {sweeper.study_name})")
    return (f"Optuna search: {sweeper.n_trials} trials, {goal} val/acc_best (the value each "
            f"training run returns); the study is kept {where}.")


def plain_optuna_logging() -> None:
    """Optuna's log lines without colour codes, unless they go to a terminal (idempotent)."""
    if sys.stderr.isatty():
        return
    import optuna  # loaded here: only an Optuna search pays for it

    optuna_logger = logging.getLogger("optuna")
    if any(handler.get_name() == PLAIN_HANDLER_NAME for handler in optuna_logger.handlers):
        return
    optuna.logging.disable_default_handler()
    handler = logging.StreamHandler()  # stderr, as Optuna's own handler
    handler.set_name(PLAIN_HANDLER_NAME)
    handler.setFormatter(logging.Formatter(OPTUNA_LOG_FORMAT))
    optuna_logger.addHandler(handler)


def remove_unused_sweep_folder(sweep_dir: Path) -> None:
    """Remove a sweep folder that holds nothing but the sweeper's setup files: no job folder
    (a new run refused before training removes its own), no job logs."""
    if sweep_dir.is_dir() and {e.name for e in sweep_dir.iterdir()} <= SWEEP_SETUP_FILES:
        shutil.rmtree(sweep_dir, ignore_errors=True)


class SweepStart(Callback):
    """The cleanup, checks and notice above, at the start of every multirun."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        # Only a folder this sweep makes (absent, or empty: an earlier callback may have made it
        # to check that it is writable): one that holds files (hydra.sweep.dir=...) is left
        # alone. At exit, since a config error ends the process (sys.exit) from inside the sweep;
        # registered first, so that the refusals below leave no folder either.
        if not sweep_dir.exists() or not any(sweep_dir.iterdir()):
            atexit.register(remove_unused_sweep_folder, sweep_dir)
        sweeper = config.hydra.sweeper
        if sweeper.get("_target_") == OPTUNA_SWEEPER:
            problem = optuna_problem(sweeper) or search_space_problem(
                sweeper.get("params") or {}, config.hydra.overrides.task)
            if problem is not None:
                print(f"Error: {problem}", file=sys.stderr, flush=True)
                sys.exit(1)
            print(optuna_notice(sweeper), flush=True)
            plain_optuna_logging()
