"""What train.py calls: runs one job and turns known failures into one clear message."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from linarena.data.errors import DataConfigError, DataFormatError, DataNotFoundError
from linarena.models import SequenceTooLongError
from linarena.training.errors import LinarenaError, NonFiniteLossError
from linarena.training.resume import checkpoint_step
from linarena.training.run import hydra_context, train
from linarena.training.signals import RunStopped

# Failures whose message already says what is wrong and what to change.
USER_ERRORS = (
    LinarenaError,
    DataNotFoundError,
    DataFormatError,
    DataConfigError,
    SequenceTooLongError,
)


def explain(err: BaseException, output_dir: Path, lr: float) -> str:
    """The message for a user-facing failure, with the way forward for a diverged run."""
    message = str(err)
    if isinstance(err, NonFiniteLossError):
        last = output_dir / "checkpoints" / "last.ckpt"
        if last.is_file():
            step = checkpoint_step(last)
            kept = (
                f"The last clean checkpoint (weights and optimizer state finite) is {last}, "
                f"step {step}. Resume from it with a lower learning rate: python train.py "
                f"ckpt_path=last hydra.run.dir={output_dir} optim.lr={lr / 10:g} (a longer "
                "optim.warmup_steps or trainer.precision=32-true may help too)."
            )
        else:
            kept = (
                "No checkpoint had been saved yet: start again with a lower optim.lr (e.g. "
                f"optim.lr={lr / 10:g}), a longer optim.warmup_steps or trainer.precision=32-true."
            )
        message += f" {kept}"
    return message


def run_job(cfg: DictConfig) -> float:
    """train(cfg), with user-facing failures printed as one message, then exit status 1.

    Config and data errors end a multirun too (the other jobs would mostly hit the same error).
    A diverged run (non-finite loss) in a multirun is re-raised instead, so Hydra marks that job
    failed and runs the others: the basic sweeper reports the failure at the end, the Optuna
    sweeper records a failed trial and goes on (hparams_search/optuna.yaml: max_failure_rate).
    Set HYDRA_FULL_ERROR=1 for the full traceback instead.
    """
    if logging.getLogger().handlers:
        # Hydra logs to the console and the job's log file; the handler `import lightning` adds
        # would print every Lightning message a second time.
        for handler in list(logging.getLogger("lightning").handlers):
            logging.getLogger("lightning").removeHandler(handler)
    try:
        return train(cfg)
    except USER_ERRORS as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        message = explain(err, Path(cfg.paths.output_dir).resolve(), getattr(err, "lr", None) or float(cfg.optim.lr))
        print(f"\nError: {message}", file=sys.stderr, flush=True)
        if isinstance(err, NonFiniteLossError) and hydra_context()[0]:
            raise
        sys.exit(err.exit_code if isinstance(err, RunStopped) else 1)
