"""The W&B side of a run's end, as a Callback (conf/logger/wandb.yaml adds it with the logger):
summaries for the runs table, the one-row comparison table, and wandb.finish."""

from __future__ import annotations

from typing import Any

import wandb
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import WandbLogger

from linarena.training.perf import PerfMonitor
from linarena.training.summary import summary_metrics
from linarena.training.wandb_run import run_info

STEP_METRIC = "trainer/global_step"
# How each metric is summarised in the runs table. "last" keeps a plain number in the summary
# (what scripts/compare.py reads); running averages, peaks and val/acc_best are already final in
# their last value. min/max summaries are stored as {"min": ...} / {"max": ...}.
METRIC_SUMMARIES = {
    "train/loss": "min",
    "val/loss": "min",
    "val/acc": "max",
    "val/acc_best": "last",
    "test/acc": "last",
    "test/loss": "last",
    "perf/samples_per_sec": "last",
    "perf/tokens_per_sec": "last",
    "perf/peak_memory_mb": "last",
}
COMPARISON_KEY = "comparison"
COMPARISON_COLUMNS = ("task", "attention", "seed", "test/acc", "val/acc_best",
                      "perf/tokens_per_sec", "perf/peak_memory_mb", "model/params")


def wandb_run_of(trainer: Trainer) -> Any | None:
    """The live W&B run of the trainer's WandbLogger on rank 0, else None."""
    if not trainer.is_global_zero:
        return None
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            return logger.experiment
    return None


def wandb_info(trainer: Trainer) -> dict[str, Any] | None:
    """id, folder, url and mode of the run's W&B run (summary.json), None without one."""
    for callback in trainer.callbacks:
        if isinstance(callback, WandbSummary) and callback.info is not None:
            return callback.info
    return None


class WandbSummary(Callback):
    """Defines the summaries at the start, and after testing writes the final metrics into the
    run summary and logs the one-row table "comparison" (a table panel on that key merges the
    rows of every run shown: task x attention x seed side by side); finishes the run after the
    test or on an exception, so each job of a multirun is its own W&B run.

    Args:
        task, attention, seed: the run's names (conf/logger/wandb.yaml interpolates them).
    """

    def __init__(self, task: str, attention: str, seed: int) -> None:
        self.names = {"task": task, "attention": attention, "seed": seed}
        self.info: dict[str, Any] | None = None
        self._val_best: float | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        run = wandb_run_of(trainer)
        if run is None or self.info is not None:
            return
        for metric, summary in METRIC_SUMMARIES.items():
            run.define_metric(metric, step_metric=STEP_METRIC, summary=summary)
        self.info = run_info(run)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Read before testing: loading the best checkpoint would restore an older maximum.
        best = getattr(pl_module, "val_acc_best", None)
        self._val_best = None if best is None else float(best.compute())

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        run = wandb_run_of(trainer)
        if run is None:
            return
        perf = next((c for c in trainer.callbacks if isinstance(c, PerfMonitor)), None)
        metrics = summary_metrics({
            **{key: trainer.callback_metrics.get(key) for key in ("test/acc", "test/loss")},
            "val/acc_best": self._val_best,
            **(perf.final_metrics() if perf is not None else {}),
        })
        run.summary.update({k: v for k, v in metrics.items() if v is not None})
        row = [self.names[key] for key in COMPARISON_COLUMNS[:3]]
        row += [metrics.get(key) for key in COMPARISON_COLUMNS[3:]]
        run.log({COMPARISON_KEY: wandb.Table(columns=list(COMPARISON_COLUMNS), data=[row])})

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "test":
            self._finish(trainer, exit_code=0)

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        self._finish(trainer, exit_code=1)

    def _finish(self, trainer: Trainer, exit_code: int) -> None:
        if wandb_run_of(trainer) is not None and wandb.run is not None:
            wandb.finish(exit_code=exit_code)
