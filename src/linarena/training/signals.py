"""SIGTERM and SIGINT (Ctrl+C): save a checkpoint, say how to resume, exit non-zero.

Lightning turns SIGTERM into a clean stop after the current training step and its validation
(SIGTERMException); SIGINT is handed to that same handler here, instead of a KeyboardInterrupt
that may land in the middle of an optimizer step. Both stop where the checkpoint they save
continues exactly as an uninterrupted run would. Under SLURM, Lightning's SLURMEnvironment
(auto_requeue) also saves an hpc checkpoint and requeues the job on its requeue signal
(conf/hydra/launcher/slurm.yaml).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from linarena.commands import resume_command
from linarena.errors import LinarenaError
from linarena.training.sweep_resume import sweep_command

# Exit statuses of a process killed by the signal (128 + signal number), as shells report them.
EXIT_CODES = {"SIGTERM": 128 + signal.SIGTERM, "SIGINT": 128 + signal.SIGINT}


class RunStopped(LinarenaError):
    """The run was stopped by a signal after saving a checkpoint."""

    def __init__(self, message: str, signal_name: str) -> None:
        super().__init__(message)
        self.exit_code = EXIT_CODES[signal_name]


class SaveOnSignal(Callback):
    """Saves `<dirpath>/last.ckpt` when the run is stopped by SIGTERM or SIGINT.

    Args:
        dirpath: the checkpoint folder (that of the last-checkpoint ModelCheckpoint).
    """

    def __init__(self, dirpath: str | Path) -> None:
        self.path = Path(dirpath) / "last.ckpt"
        self.signal_name: str | None = None
        self.saved = False
        self._previous_sigint: Any = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._previous_sigint = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.signal_name = "SIGINT"
        # A second Ctrl+C stops at once.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Lightning's SIGTERM handler (the trainer installs it before training starts): a stop
        # at the end of the training step would skip that step's validation and checkpoint.
        on_sigterm = signal.getsignal(signal.SIGTERM)
        if callable(on_sigterm):
            on_sigterm(signal.SIGTERM, frame)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._restore_sigint()

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._restore_sigint()
        if not isinstance(exception, SIGTERMException):
            return
        self.signal_name = self.signal_name or "SIGTERM"
        if trainer.state.fn != TrainerFn.FITTING:
            return  # while testing, the weights in memory are the best checkpoint's, not the last
        # The whole training state (weights_only=False), said explicitly: Lightning logs a line
        # at every save that leaves it unset.
        trainer.save_checkpoint(self.path, weights_only=False)
        self.saved = True

    def _restore_sigint(self) -> None:
        if self._previous_sigint is not None:
            signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    def stopped(self, trainer: Trainer, output_dir: Path) -> RunStopped:
        """The error that ends the run, with the command that resumes it."""
        where = (
            f"saved the checkpoint {self.path}"
            if self.saved
            else f"training had ended, its checkpoints are in {self.path.parent}"
        )
        sweep = sweep_command()
        rest = "" if sweep is None else (
            "; or complete the sweep (finished jobs are skipped, stopped ones resumed, the rest "
            f"trained) with the same command: {sweep}")
        return RunStopped(
            f"Stopped by {self.signal_name} at step {trainer.global_step}; {where}. Resume "
            f"with: {resume_command(output_dir)}{rest}",
            self.signal_name or "SIGTERM",
        )
