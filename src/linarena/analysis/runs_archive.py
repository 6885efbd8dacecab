"""A comparison's runs CSV (compare.py's results_runs.csv, table.runs_table) read back as runs.

A sweep that spans machines or sessions resumes from the runs CSV it committed, as the
state-size study resumes from its own (studies.runs.load_archive): scripts/seed_sweep.py
--resume-from skips the runs listed there, and scripts/compare.py --resume-from counts them beside
the summary.json files it finds. A run found as a summary.json wins over its archived row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.runs import RunRecord
from linarena.metrics import compared_metrics

# The columns that name a run; every row must fill them.
NAME_COLUMNS = ("sweep", "task", "attention", "seed", "source")


def run_key(record: RunRecord) -> tuple[str, str, str, str | None, int]:
    """What identifies a run within the comparison (as runs.drop_reruns compares them)."""
    return record.sweep, record.task, record.attention, record.positions, record.seed


def _value(cell: Any) -> Any:
    """A CSV cell as RunRecord holds it: None for a blank cell."""
    return None if cell is None or (isinstance(cell, float) and math.isnan(cell)) else cell


def load_runs_csv(path: Path) -> list[RunRecord]:
    """The runs of a runs CSV written by compare.py (results_runs.csv), as RunRecords: metrics
    by key as stored (table units divided by Metric.scale: accuracy a fraction), None where
    blank. A damaged or foreign file is a
    ResultFileError naming the file and line."""
    metrics = compared_metrics()
    names = [metric.name for metric in metrics]
    table = read_csv_checked(
        Path(path), required_columns=(*NAME_COLUMNS, "failed", *names),
        numeric_columns=("seed", "max_steps", "duration_s", "cpu_s", *names),
        filled_columns=NAME_COLUMNS)
    records = []
    for row in table.to_dict("records"):
        row = {column: _value(cell) for column, cell in row.items()}
        max_steps = row.get("max_steps")
        records.append(RunRecord(
            task=str(row["task"]), attention=str(row["attention"]), seed=int(row["seed"]),
            metrics={metric.key: None if row[metric.name] is None
                     else row[metric.name] / metric.scale for metric in metrics},
            source=str(row["source"]), sweep=str(row["sweep"]),
            max_steps=None if max_steps is None else int(max_steps),
            duration_s=row.get("duration_s"), cpu_s=row.get("cpu_s"),
            positions=row.get("positions"),
            commit=row.get("commit"), cpu=row.get("cpu"), cpu_kernels=row.get("cpu_kernels")))
    return records


def with_archive(records: Iterable[RunRecord], archived: Iterable[RunRecord]) -> list[RunRecord]:
    """`records` and the archived runs none of them reruns (run_key): a run found again wins."""
    records = list(records)
    found = {run_key(record) for record in records}
    return [*records, *(record for record in archived if run_key(record) not in found)]
