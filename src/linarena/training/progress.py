"""What a run prints while it trains: a progress bar over the optimizer steps in a terminal, a
plain log line every so often otherwise (Slurm, nohup, pipes), and a model summary without the
FLOPs column Lightning fills with zeros."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelSummary, TQDMProgressBar
from lightning.pytorch.callbacks import model_summary as lightning_summary

from linarena.metrics import progress_metrics

log = logging.getLogger(__name__)



def shown_metrics(trainer: Trainer) -> dict[str, str]:
    """The progress-bar metrics (linarena.metrics: those with a `progress` short name and
    format; logged with prog_bar=True) under their short names, formatted."""
    metrics = trainer.progress_bar_metrics
    return {metric.progress[0]: format(float(metrics[metric.key]), metric.progress[1])
            for metric in progress_metrics() if metric.key in metrics}


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class StepProgress(TQDMProgressBar):
    """Progress in optimizer steps (trainer.max_steps), not epochs: in a terminal a bar
    ``train 120/600 [..., loss=1.23, val_acc=0.31, best=0.33, tok/s=12,345]``; when stdout is not
    a terminal, no bar but a log line every `log_interval_s` seconds and at the end.

    Args:
        log_interval_s: seconds between plain log lines when stdout is not a terminal.
        refresh_rate: steps between bar updates in a terminal.
    """

    def __init__(self, log_interval_s: float = 30.0, refresh_rate: int = 1) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.log_interval_s = log_interval_s
        self.plain = not sys.stdout.isatty()
        self._started = 0.0
        self._last_line = 0.0
        self._first_step = 0
        if self.plain:
            self.disable()

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, str]:
        """What every bar update shows (also after validation): see shown_metrics."""
        return shown_metrics(trainer)

    def total_steps(self, trainer: Trainer) -> int | None:
        return trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._started = self._last_line = time.monotonic()
        self._first_step = trainer.global_step
        if self.plain:
            total, done = self.total_steps(trainer), trainer.global_step
            steps = (f"steps {done + 1}-{total} of {total} (resumed at step {done})"
                     if done and total else f"{total or '?'} steps")
            log.info("Training %s (a progress line every %.0f s)", steps, self.log_interval_s)
            return
        super().on_train_start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: Trainer, *_: Any) -> None:
        if self.plain:
            return
        bar = self.train_progress_bar
        bar.reset(total=self.total_steps(trainer))
        bar.initial = 0
        bar.n = trainer.global_step  # a resumed run starts where it stopped
        bar.set_description("train")
        bar.refresh()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.plain:
            if time.monotonic() - self._last_line >= self.log_interval_s:
                self.log_line(trainer)
            return
        bar = self.train_progress_bar
        if bar is not None and self._should_update(step, bar.total or 0):
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.plain:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.plain:
            self.log_line(trainer)
            return
        super().on_train_end(trainer, pl_module)

    def log_line(self, trainer: Trainer) -> None:
        """``step 120/600 (20%), loss 1.23, ..., 1:02 elapsed, ~4:08 left``."""
        now = time.monotonic()
        self._last_line = now
        step, total = trainer.global_step, self.total_steps(trainer)
        elapsed = now - self._started
        parts = [f"step {step}/{total or '?'}" + (f" ({100 * step / total:.0f}%)" if total else "")]
        parts += [f"{name} {value}" for name, value in shown_metrics(trainer).items()]
        parts.append(f"{_duration(elapsed)} elapsed")
        done = step - self._first_step  # steps of this process (a resumed run started later)
        if total and done > 0 and step < total:
            parts.append(f"~{_duration(elapsed / done * (total - step))} left")
        log.info(", ".join(parts))


class CompactModelSummary(ModelSummary):
    """Lightning's model summary without the FLOPs column and the "0 Total Flops" line when
    nothing was counted (nothing is, unless the model sets example_input_array)."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        kept = [(name, column) for name, column in summary_data
                if not (name == "FLOPs" and all(v.strip() in ("0", "n/a") for v in column))]
        # Lightning's own table (a private helper: the public summarize prints it whole).
        table = lightning_summary._format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes, total_flops,
            *kept)
        if not total_flops:
            table = "\n".join(line for line in table.splitlines()
                              if not line.rstrip().endswith("Total Flops"))
        lightning_summary.log.info("\n" + table)
