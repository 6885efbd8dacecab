"""The end of a run, the same for every logger: the summary (summary.json) and the comparison
row are computed once, by the run, and sent to each configured logger.

A logger that has more to do with them implements :class:`SummaryHook` (W&B: its run summary,
the "comparison" table, finishing the run; linarena.training.wandb_run); any other logger gets
the summary's metrics through its public ``log_metrics`` at the last step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from lightning.pytorch.loggers import Logger


@runtime_checkable
class SummaryHook(Protocol):
    """What a logger may add to the end of a run."""

    def summary_fields(self) -> dict[str, Any]:
        """Logger-specific fields of summary.json, each under the logger's conf/logger/ name (e.g.
        {"wandb": {"id": ..., ...}}): the one part of summary.json that differs by logger."""
        ...

    def log_run_summary(self, summary: dict[str, Any], row: dict[str, Any]) -> None:
        """Record the finished run's summary and its comparison row."""
        ...


def logger_fields(loggers: Iterable[Logger]) -> dict[str, Any]:
    """The logger-specific fields of summary.json, from every logger with a hook."""
    fields: dict[str, Any] = {}
    for logger in loggers:
        if isinstance(logger, SummaryHook):
            fields |= logger.summary_fields()
    return fields


def send_summary(loggers: Iterable[Logger], summary: dict[str, Any], row: dict[str, Any]) -> None:
    """Send the run's summary and comparison row to every logger."""
    for logger in loggers:
        if isinstance(logger, SummaryHook):
            logger.log_run_summary(summary, row)
            continue
        numbers = {key: float(value) for key, value in summary["metrics"].items()
                   if value is not None}
        logger.log_metrics(numbers, step=summary["global_step"])
        logger.save()
