"""The W&B saved views scripts/wandb_dashboard.py creates, built with wandb-workspaces (the
W&B-maintained API for workspaces), from the metric names training logs.

One view per task ("linarena: <task>", debug runs filtered out): test accuracy against tokens/s
(the LRA figure), test accuracy per attention as bars (mean ± std over seeds), val/acc against
the step grouped by attention, the merged "comparison" table and a runs table with the
comparison columns pinned. One view "linarena: benchmarks": peak memory and time against
sequence length, per attention, from benchmark CSVs uploaded as runs of group "benchmark".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.bench_runner import read_benchmark_csv
from linarena.analysis.order import attention_sort_key
from linarena.metrics import (
    PEAK_MEMORY_MB,
    STEP_KEY,
    TEST_ACC,
    TOKENS_PER_SEC,
    VAL_ACC,
    row_metrics,
)
from linarena.training.summary import NAME_COLUMNS
from linarena.training.wandb_run import COMPARISON_KEY

BENCHMARK_GROUP = "benchmark"
# Keys of the benchmark runs (upload_benchmarks), one history row per sequence length.
BENCH_LENGTH, BENCH_MEMORY, BENCH_MS = "bench/length", "bench/peak_memory_mb", "bench/ms"


def workspaces() -> tuple[Any, Any]:
    """The wandb_workspaces modules (workspaces, reports.v2); SystemExit with how to install
    them when absent."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError as err:
        raise SystemExit("wandb_dashboard.py needs wandb-workspaces: "
                         'pip install -e ".[dashboard]"') from err
    return ws, wr


def task_view(entity: str, project: str, task: str) -> Any:
    """The saved view of one task (a wandb_workspaces Workspace, not yet saved)."""
    ws, wr = workspaces()
    accuracy, throughput, memory = TEST_ACC.key, TOKENS_PER_SEC.key, PEAK_MEMORY_MB.key
    attention = wr.Config("attention")
    panels = [
        wr.ScatterPlot(title=f"{task}: test accuracy vs training tokens/s", x=throughput,
                       y=accuracy, log_x=True),
        wr.BarPlot(title=f"{task}: test accuracy per attention (mean ± std over seeds)",
                   metrics=[accuracy], groupby=attention, groupby_aggfunc="mean",
                   groupby_rangefunc="stddev", orientation="v"),
        wr.LinePlot(title=f"{task}: validation accuracy by step", x=STEP_KEY, y=[VAL_ACC.key],
                    groupby=attention, groupby_aggfunc="mean", groupby_rangefunc="stddev"),
        wr.BarPlot(title=f"{task}: peak memory per attention (MB)", metrics=[memory],
                   groupby=attention, groupby_aggfunc="mean", groupby_rangefunc="stddev",
                   orientation="v"),
        wr.WeavePanelSummaryTable(table_name=COMPARISON_KEY),
    ]
    return ws.Workspace(
        entity=entity, project=project, name=f"linarena: {task}",
        sections=[ws.Section(name=f"{task}: accuracy, throughput, memory", panels=panels,
                             is_open=True)],
        runset_settings=ws.RunsetSettings(
            filters=f"Config('task') = '{task}' and Metric('Group') != 'debug'",
            # The comparison columns: the run's names (config), then the compared metrics.
            pinned_columns=[*(f"config:{c}" for c in NAME_COLUMNS),
                            *(f"summary:{m.key}" for m in row_metrics())],
        ),
    )


def benchmark_view(entity: str, project: str) -> Any:
    """The saved view of the benchmark runs: memory and time against sequence length."""
    ws, wr = workspaces()
    attention = wr.Config("attention")
    panels = [
        wr.LinePlot(title="peak memory vs sequence length", x=BENCH_LENGTH, y=[BENCH_MEMORY],
                    groupby=attention, log_x=True, log_y=True),
        wr.LinePlot(title="time per call vs sequence length (ms)", x=BENCH_LENGTH, y=[BENCH_MS],
                    groupby=attention, log_x=True, log_y=True),
    ]
    return ws.Workspace(
        entity=entity, project=project, name="linarena: benchmarks",
        sections=[ws.Section(name="benchmarks", panels=panels, is_open=True)],
        runset_settings=ws.RunsetSettings(filters=f"Metric('Group') = '{BENCHMARK_GROUP}'"),
    )


def panel_keys(view: Any) -> set[str]:
    """Every metric key the view's panels and pinned columns read (for tests)."""
    keys: set[str] = set()
    for section in view.sections:
        for panel in section.panels:
            for field in ("x", "y", "metrics", "table_name"):
                value = getattr(panel, field, None)
                values = value if isinstance(value, list) else [value]
                keys |= {str(v) for v in values if isinstance(v, str)}
    for column in view.runset_settings.pinned_columns:
        kind, _, name = column.partition(":")
        if kind == "summary":
            keys.add(name)
    return keys


def benchmark_rows(csv_path: Path) -> Iterable[tuple[dict[str, Any], pd.DataFrame]]:
    """(run config, measured rows by length) per (what, attention) of a benchmark CSV."""
    rows = read_benchmark_csv(csv_path)
    rows = rows[rows["status"] == "ok"]
    for (what, name), group in rows.groupby(["what", "attention"]):
        config = {"attention": name, "what": what, "csv": csv_path.name,
                  **{key: group.iloc[0][key] for key in ("device", "dtype", "batch")
                     if key in group}}
        yield config, group.sort_values("length")


def upload_benchmarks(entity: str, project: str, csv_paths: Iterable[Path]) -> int:
    """Log each (what, attention) of the benchmark CSVs as a W&B run of group "benchmark",
    one history row per length; returns the number of runs."""
    import wandb

    count = 0
    for csv_path in csv_paths:
        for config, group in sorted(benchmark_rows(csv_path),
                                    key=lambda item: attention_sort_key(item[0]["attention"])):
            run = wandb.init(entity=entity, project=project, group=BENCHMARK_GROUP,
                             job_type=config["what"],
                             name=f"{config['attention']}-{config['what']}",
                             config=config, reinit="finish_previous")
            run.define_metric(BENCH_MEMORY, step_metric=BENCH_LENGTH)
            run.define_metric(BENCH_MS, step_metric=BENCH_LENGTH)
            for row in group.itertuples():
                run.log({BENCH_LENGTH: int(row.length), BENCH_MEMORY: float(row.peak_memory_mb),
                         BENCH_MS: float(row.ms)})
            run.finish()
            count += 1
    return count
