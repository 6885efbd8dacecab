"""The metrics of a run, each declared once: its key, how summary.json, W&B, the progress bar, the
comparison table and the dashboard show it.

Adding a metric is one :class:`Metric` declaration here (METRICS collects them) plus computing
it (logging it during training, or returning it from
:meth:`linarena.training.perf.PerfMonitor.final_metrics` for a figure of the whole run): every
reader iterates this registry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# summary.json's format. 1: the first (no schema_version key); 2: schema_version and the resolved
# config ("config") added, optional metrics may be absent; 3: hparams.attention and hparams.data
# (every scalar setting of those groups) replace hparams.num_features and
# hparams.zero_pixel_is_padding. Readers accept every version.
SCHEMA_VERSION = 3
# W&B's x axis: every row is logged with the trainer's global step under this key.
STEP_KEY = "trainer/global_step"


@dataclass(frozen=True)
class Metric:
    """One metric.

    Args:
        key: the name it is logged under (summary.json, W&B, Lightning), e.g. "test/acc".
        wandb_summary: how W&B summarises its history ("min", "max", "last"); "last" keeps a
            plain number in the W&B run summary, which is what compare.py --wandb reads.
        in_summary: a figure of the whole run, written to summary.json's "metrics" block.
        required: the comparison needs it (a summary.json without it cannot be compared);
            optional ones may be absent, e.g. from summaries older than the metric.
        name: the comparison's column stem (results.csv: <name>_mean, <name>_std); None: not
            a column of the comparison table.
        in_row: in the per-run comparison row (W&B "comparison" table, pinned dashboard
            columns) although not a column of the comparison table.
        column: the comparison table's Markdown header.
        digits: decimals in the Markdown table.
        scale: factor from the stored value to the table's (100 for a fraction shown in %).
        integer: stored as an int in summary.json.
        progress: (short name, format) on the progress bar and progress lines; None: not shown.
        since: the summary.json schema version that first has it (older summaries lack it). A
            new optional metric needs nothing else; a new required one bumps SCHEMA_VERSION and
            sets since to it, so that a summary written before it is told apart from a damaged
            one (analysis.runs).
        prefix: `key` names a family: every logged key that starts with it (one per test
            setting, e.g. test/acc_L256_P64 of the MQAR mixture), each treated as this metric.
        measured: a measurement of the machine (time, memory), not a result of the
            computation: two identical runs give other values.
    """

    key: str
    wandb_summary: str = "last"
    in_summary: bool = False
    required: bool = False
    name: str | None = None
    column: str | None = None
    digits: int = 0
    scale: float = 1.0
    integer: bool = False
    progress: tuple[str, str] | None = None
    in_row: bool = False
    since: int = 1
    prefix: bool = False
    measured: bool = False


# The registry, in the order every reader shows the metrics (METRICS, below, collects them).
TRAIN_LOSS = Metric("train/loss", wandb_summary="min", progress=("loss", ".3f"))
TRAIN_ACC = Metric("train/acc")
TRAIN_LR = Metric("train/lr")
VAL_LOSS = Metric("val/loss", wandb_summary="min")
VAL_ACC = Metric("val/acc", wandb_summary="max", progress=("val_acc", ".3f"))
TEST_ACC = Metric("test/acc", in_summary=True, required=True, name="test_acc_pct",
                  column="test acc (%)", digits=2, scale=100.0)
TEST_LOSS = Metric("test/loss", in_summary=True)
VAL_ACC_BEST = Metric("val/acc_best", in_summary=True, in_row=True, progress=("best", ".3f"))
TOKENS_PER_SEC = Metric("perf/tokens_per_sec", in_summary=True, required=True,
                        name="tokens_per_sec", column="tokens/s", progress=("tok/s", ",.0f"),
                        measured=True)
SAMPLES_PER_SEC = Metric("perf/samples_per_sec", in_summary=True, measured=True)
PEAK_MEMORY_MB = Metric("perf/peak_memory_mb", in_summary=True, required=True,
                        name="peak_memory_mb", column="peak memory (MB)", digits=1,
                        measured=True)
PARAMS = Metric("model/params", in_summary=True, required=True, name="params", column="params",
                integer=True)
# Accuracy per test setting, test/acc_L<length>_P<pairs>, from tasks with several (MQAR mixture).
TEST_ACC_PER_SETTING = Metric("test/acc_", in_summary=True, prefix=True, since=2)
# Self-pretraining (training/pretrain.py): the loss and accuracy of the pretraining objective,
# over the predicted positions only (masked real tokens for mlm, every real token with a real
# successor for lm). Logged by the pretraining stage alone; its summary.json has them under
# "pretrain" (not in "metrics", which every run's summary lists in full).
PRETRAIN_LOSS = Metric("pretrain/loss", wandb_summary="min", progress=("pt_loss", ".3f"))
PRETRAIN_ACC = Metric("pretrain/acc")
PRETRAIN_VAL_LOSS = Metric("pretrain/val_loss", wandb_summary="min")
PRETRAIN_VAL_ACC = Metric("pretrain/val_acc", wandb_summary="max",
                          progress=("pt_val_acc", ".3f"))
PRETRAIN_VAL_ACC_BEST = Metric("pretrain/val_acc_best", progress=("pt_best", ".3f"))
PRETRAIN_TEST_LOSS = Metric("pretrain/test_loss")
PRETRAIN_TEST_ACC = Metric("pretrain/test_acc")

# Every Metric declared above, in their order: a new metric is its declaration, nothing more.
METRICS: tuple[Metric, ...] = tuple(m for m in dict(globals()).values() if isinstance(m, Metric))


def summary_metrics() -> tuple[Metric, ...]:
    """The metrics every summary.json's "metrics" block holds, in registry order (families of
    per-setting keys, present only for the tasks that have them, are not listed)."""
    return tuple(m for m in METRICS if m.in_summary and not m.prefix)


def measured_metrics() -> tuple[Metric, ...]:
    """The metrics that measure the machine (two identical runs differ in them)."""
    return tuple(m for m in METRICS if m.measured)


def compared_metrics() -> tuple[Metric, ...]:
    """The metrics that are columns of the comparison (table, CSV, W&B comparison row)."""
    return tuple(m for m in METRICS if m.name is not None)


def row_metrics() -> tuple[Metric, ...]:
    """The metrics of a run's comparison row: the compared ones and those marked in_row."""
    return tuple(m for m in METRICS if m.name is not None or m.in_row)


def progress_metrics() -> tuple[Metric, ...]:
    """The metrics the progress bar shows, in registry order."""
    return tuple(m for m in METRICS if m.progress is not None)


def finite_or_none(value: Any) -> float | None:
    """JSON has no NaN/inf: non-finite or missing values become None."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def metrics_block(values: dict[str, Any]) -> dict[str, float | int | None]:
    """summary.json's "metrics": every summary metric, a float (an int where declared), None
    when missing or not finite."""
    block: dict[str, float | int | None] = {}
    for metric in summary_metrics():
        value = finite_or_none(values.get(metric.key))
        block[metric.key] = int(value) if metric.integer and value is not None else value
    for family in (m for m in METRICS if m.in_summary and m.prefix):
        block.update({key: finite_or_none(value) for key, value in sorted(values.items())
                      if key.startswith(family.key)})
    return block
