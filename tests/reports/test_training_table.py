"""The README's small-budget table (results_tables.training_table): a recall task is published
as a rate with its interval and the median and range, not as a mean ± std of a bimodal outcome
(issue #26); other tasks as mean ± std."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from linarena.reports.results_tables import training_table


def test_recall_rows_give_the_rate_its_interval_and_the_median(tmp_path: Path) -> None:
    row = {"sweep": "outputs/sweeps/x", "n": 5, "test_acc_pct_std": 1.0,
           "tokens_per_sec_mean": 1234.0, "peak_memory_mb_mean": 700.0}
    pd.DataFrame([
        {**row, "task": "listops_small", "attention": "elu", "test_acc_pct_mean": 38.2,
         "n_seeds": 5, "successes": 0, "success_ci_low": 0.0, "success_ci_high": 0.434,
         "median_acc": 0.38, "min_acc": 0.37, "max_acc": 0.39},
        {**row, "task": "mqar", "attention": "gated_deltanet", "test_acc_pct_mean": 57.0,
         "n_seeds": 10, "successes": 5, "success_ci_low": 0.2366, "success_ci_high": 0.7634,
         "median_acc": 0.881, "min_acc": 0.127, "max_acc": 0.991},
    ]).to_csv(tmp_path / "results.csv", index=False)
    listops, mqar = training_table(tmp_path).split("\n\n")
    assert "| listops_small | elu+1 | 5 | 38.20 ± 1.00 | 1,234 | 700 |" in listops
    assert "| mqar | Gated DeltaNet | 5/10 | 24–76 | 88.1 (12.7–99.1) | 1,234 | 700 |" in mqar
    assert "57.00" not in mqar  # no mean of a bimodal outcome
