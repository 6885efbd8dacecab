"""Sweep x task x attention results table: mean ± sample std over seeds of every compared metric
(linarena.metrics), the failed runs counted, optional published accuracies (only beside the task
they were published for)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from linarena.analysis.order import attention_label, attention_sort_key, task_sort_key
from linarena.analysis.runs import RunRecord
from linarena.analysis.statistics import STATISTICS_COLUMNS, point_statistics
from linarena.metrics import TEST_ACC, compared_metrics

PUBLISHED_HEADER = "published (LRA paper), not measured here"
LRA_SOURCE = "LRA paper (Tay et al. 2021), Table 1"
COSFORMER_SOURCE = "cosFormer paper (Qin et al. 2022), unverified"
# The data configs (task names) of the LRA tasks the papers report, in their table's order; any
# other task (listops_small, mqar, ...) gets no published number.
LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")
# Test accuracy (%) as published in the papers named. On Path-X every model failed.
PUBLISHED_ACC_PCT: dict[tuple[str, str], tuple[float | None, str]] = {
    **{(task, "softmax"): (acc, LRA_SOURCE) for task, acc in zip(
        LRA_TASKS, (36.37, 64.27, 57.46, 42.44, 71.40), strict=True)},
    **{(task, "performer"): (acc, LRA_SOURCE) for task, acc in zip(
        LRA_TASKS, (18.01, 65.40, 53.82, 42.77, 77.05), strict=True)},
    **{(task, "elu"): (acc, LRA_SOURCE) for task, acc in zip(
        LRA_TASKS, (16.13, 65.90, 53.09, 42.34, 75.30), strict=True)},
    **{(task, "cosformer"): (acc, COSFORMER_SOURCE) for task, acc in zip(
        LRA_TASKS, (37.9, 63.41, 61.36, 43.17, 70.33), strict=True)},
    **{("pathx", name): (None, f"{LRA_SOURCE}: fail (chance)")
       for name in ("softmax", "performer", "elu")},
}


# A row of the table: runs of one sweep, task and attention with one kind of positions
# (model.positions) and one step budget.
KEYS = ["sweep", "task", "attention", "positions", "max_steps"]


def runs_table(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per run (results_runs.csv, the per-seed source of results.csv): its names, seed,
    every compared metric in table units as its column names it (test_acc_pct in percent;
    blank where absent or failed), how long it took (and its process's CPU seconds, blank for
    runs trained before they were recorded), and the commit and machine that trained
    it."""
    metrics = compared_metrics()
    return pd.DataFrame([
        {"sweep": r.sweep, "task": r.task, "attention": r.attention, "seed": r.seed,
         "positions": r.positions, "max_steps": r.max_steps, "failed": r.failed,
         **{m.name: None if r.failed or r.metrics.get(m.key) is None
            else r.metrics[m.key] * m.scale for m in metrics},
         "duration_s": r.duration_s, "cpu_s": r.cpu_s, "commit": r.commit, "cpu": r.cpu,
         "cpu_kernels": r.cpu_kernels, "source": r.source}
        for r in records])


def aggregate_runs(records: Iterable[RunRecord], published: bool = False) -> pd.DataFrame:
    """One row per (sweep, task, attention, positions, max_steps): n (finished runs), n_failed
    (runs without a finite test accuracy, left out of the means), ``<name>_mean`` / ``<name>_std``
    per compared metric (in table units, e.g. accuracy in percent) and ``duration_s_median`` (the
    median time a run took; NaN where the runs do not say), then the STATISTICS_COLUMNS of the
    test accuracy over seeds (analysis.statistics: seeds at 90%, the rate's Wilson interval, the
    median and range, as fractions). positions and max_steps are NaN for runs whose summary does
    not give them.

    std is the sample std (ddof=1), NaN when n = 1. With ``published``, adds
    ``published_test_acc_pct`` and ``published_source`` (blank where nothing was published).
    """
    metrics = compared_metrics()
    runs = pd.DataFrame([
        {"sweep": r.sweep, "task": r.task, "attention": r.attention, "positions": r.positions,
         "max_steps": float("nan") if r.max_steps is None else r.max_steps, "failed": r.failed,
         "duration_s": float("nan") if r.duration_s is None else r.duration_s,
         **{m.name: (float("nan") if r.failed or r.metrics.get(m.key) is None
                     else r.metrics[m.key] * m.scale) for m in metrics}}
        for r in records])
    if runs.empty:
        raise ValueError("no runs to compare")
    grouped = runs.groupby(KEYS, dropna=False)
    n_failed = grouped["failed"].sum().astype(int)
    table = (grouped.size() - n_failed).rename("n").to_frame()
    table["n_failed"] = n_failed
    finished = runs[~runs["failed"]].groupby(KEYS, dropna=False)
    for metric in metrics:
        table[f"{metric.name}_mean"] = finished[metric.name].mean()
        table[f"{metric.name}_std"] = finished[metric.name].std(ddof=1)
    table["duration_s_median"] = grouped["duration_s"].median()
    # The statistics of every recall result: seeds at 90% test accuracy with the
    # rate's Wilson interval, median and range (a failed run counts in n, never in k).
    statistics = grouped[TEST_ACC.name].apply(
        lambda acc: pd.Series(point_statistics(acc / TEST_ACC.scale))).unstack()
    for column in STATISTICS_COLUMNS:
        table[column] = statistics[column]
    table = table.reset_index()
    table = table.iloc[sorted(range(len(table)), key=lambda i: (
        table.at[i, "sweep"], task_sort_key(table.at[i, "task"]),
        attention_sort_key(table.at[i, "attention"])))]
    table = table.reset_index(drop=True)
    if published:
        entries = [PUBLISHED_ACC_PCT.get((t, a), (None, "")) for t, a in
                   zip(table["task"], table["attention"], strict=True)]
        table["published_test_acc_pct"] = [acc for acc, _ in entries]
        table["published_source"] = [source for _, source in entries]
    return table


def _mean_std(mean: float, std: float, digits: int) -> str:
    if pd.isna(mean):
        return "n/a"
    text = f"{mean:,.{digits}f}"
    return text if pd.isna(std) else f"{text} ± {std:,.{digits}f}"


def to_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown: one row per task x attention (its display label, as in the
    plots), "mean ± std" cells (std over seeds) of each compared metric, then the runs' positions
    and step budget; a sweep column first when the table holds several sweeps, a "failed" column
    when some run failed."""
    metrics = compared_metrics()
    several = table["sweep"].nunique() > 1
    any_failed = bool(table["n_failed"].gt(0).any())
    headers = ["task", "attention", "n (seeds)", *(["failed"] if any_failed else []),
               *(m.column for m in metrics), "positions", "steps (max)"]
    if several:
        headers.insert(0, "sweep")
    # Only when some task here has a published number (listops_small, mqar, ... have none).
    has_published = "published_source" in table.columns and bool(
        table["published_source"].fillna("").astype(str).str.len().gt(0).any())
    if has_published:
        headers.append(f"test acc (%), {PUBLISHED_HEADER}")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for _, row in table.iterrows():
        steps = "–" if pd.isna(row["max_steps"]) else f"{row['max_steps']:,.0f}"
        positions = "–" if pd.isna(row["positions"]) else row["positions"]
        cells = [row["task"], attention_label(row["attention"]), str(row["n"]),
                 *([str(row["n_failed"])] if any_failed else []),
                 *(_mean_std(row[f"{m.name}_mean"], row[f"{m.name}_std"], m.digits)
                   for m in metrics), positions, steps]
        if several:
            cells.insert(0, row["sweep"])
        if has_published:
            cells.append(_published_cell(row["published_test_acc_pct"], row["published_source"]))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [
        "",
        "Mean ± sample standard deviation (ddof=1) over training seeds; no ± when n = 1.",
        f"{' and '.join(m.column for m in metrics if m.measured)} are the training runs' own "
        "measurements (see each run's device and precision); positions: model.positions of the "
        "runs; steps (max): trainer.max_steps of the runs.",
    ]
    if any_failed:
        notes.append("failed: runs without a finite test accuracy (diverged); they are not in "
                     "n or the means.")
    if has_published:
        notes.append(f"Published column: {LRA_SOURCE}, not measured here (different models, "
                     f"hardware and budgets); † {COSFORMER_SOURCE}.")
    return "\n".join(lines + notes) + "\n"


def _published_cell(accuracy: float | None, source: str) -> str:
    if not source:
        return ""
    if accuracy is None or pd.isna(accuracy):
        return "fail"
    return f"{accuracy:.2f}" + (" †" if source == COSFORMER_SOURCE else "")
