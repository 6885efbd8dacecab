"""Which training steps send their values to the loggers."""

from __future__ import annotations

from lightning.pytorch import Trainer


def logs_this_step(trainer: Trainer) -> bool:
    """True on the training steps whose on_step values Lightning hands to the loggers: every
    trainer.log_every_n_steps-th step, the last one, and every step of fast_dev_run.

    A value logged on another step is overwritten before any logger sees it, yet each self.log
    call costs a few hundred microseconds of Lightning's bookkeeping (moving its result
    collection), more than the whole forward pass of a study model at d_model 16; so the module
    and the callbacks log (and compute what they log) only on these steps. Lightning's own
    callbacks (LearningRateMonitor, ThroughputMonitor) ask the same private property.
    """
    return bool(trainer._logger_connector.should_update_logs or trainer.fast_dev_run)
