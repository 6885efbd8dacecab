"""The subject's runs against the published rows (docs/results/*_runs.csv and the point tables),
never against retrained published attentions, with the tests the study scripts use
(analysis.statistics): ListOps, the exact permutation test of the mean test accuracy against
every published attention's seeds (scripts/maintainer/pairwise_tests.py's test), Holm over those
comparisons; MQAR state size, Fisher's exact test of the seeds at 90% against every published
point of the same width and short conv (point_pairs' test), Holm within that column; the MQAR
mixture, the same test per kind of positions and test setting against every published
attention's rate there, Holm within each (positions, setting). Every published row names the
machines (CPU, kernels) and commits that trained it: a seed's outcome can move with the CPU, so
MQAR is compared as rates, never seed by seed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.statistics import (
    ALPHA,
    fisher_exact,
    holm,
    permutation_p_value,
    smallest_p,
)
from linarena.attention.patterns import pattern_label
from linarena.metrics import TEST_ACC
from linarena.studies.mixture import RUN_COLUMNS, summarize

LISTOPS_RUNS = PUBLISHED_DIR / "results_runs.csv"
STATE_SIZE_POINTS = PUBLISHED_DIR / "mqar_state_size.csv"
STATE_SIZE_RUNS = PUBLISHED_DIR / "mqar_state_size_runs.csv"
MIXTURE_RUNS = PUBLISHED_DIR / "mqar_mixture_runs.csv"


def machines(runs: pd.DataFrame) -> str:
    """'AMD EPYC AVX512 x10; commit 272ec9e' for the rows of one published point."""
    kernels = runs["cpu"].fillna("?") + " " + runs["cpu_kernels"].fillna("?")
    where = "; ".join(f"{name} x{count}" for name, count in kernels.value_counts().items())
    commits = ", ".join(sorted({str(c)[:7] for c in runs["commit"].dropna()}))
    return f"{where}; commit {commits or '?'}"


def published_listops(path: Path = LISTOPS_RUNS) -> pd.DataFrame:
    """The published small-budget ListOps runs (task listops_small, 300 steps)."""
    runs = read_csv_checked(path, ["task", "attention", "test_acc_pct", "max_steps"],
                            numeric_columns=["test_acc_pct", "tokens_per_sec", "max_steps",
                                             "duration_s"])
    return runs[(runs["task"] == "listops_small") & (runs["max_steps"] == 300)]


def listops_comparison(name: str, accuracies: Sequence[float],
                       published: pd.DataFrame) -> pd.DataFrame:
    """One row per published attention (other than `name`): its seeds' mean, std and range,
    its median tokens/s, where it ran, and the permutation test of `accuracies` (the subject's
    seeds, fractions) against its seeds, with the p floor of the two seed counts and Holm over
    the rows."""
    ours = [float(a) for a in accuracies if a == a]
    rows = []
    for attention, seeds in published.groupby("attention", sort=False):
        if attention == name:
            continue
        theirs = list((seeds["test_acc_pct"] / TEST_ACC.scale).dropna())
        p = permutation_p_value(ours, theirs) if ours and theirs else float("nan")
        rows.append({"attention": attention, "label": pattern_label(attention),
                     "n": len(theirs), "mean_acc": pd.Series(theirs).mean(),
                     "std_acc": pd.Series(theirs).std(), "min_acc": min(theirs),
                     "max_acc": max(theirs), "tokens_per_sec": seeds["tokens_per_sec"].median(),
                     "machines": machines(seeds), "p": p,
                     "p_floor": smallest_p(False, len(ours), len(theirs)) if ours else
                     float("nan")})
    table = pd.DataFrame(rows)
    tested = table["p"].notna()
    table["p_holm"] = float("nan")
    table.loc[tested, "p_holm"] = holm(list(table.loc[tested, "p"]))
    table["separated"] = table["p_holm"] < ALPHA
    return table.sort_values("mean_acc", ascending=False).reset_index(drop=True)


def published_state_size(points: Path = STATE_SIZE_POINTS,
                         runs: Path = STATE_SIZE_RUNS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The published state-size points (one per attention, short conv, width) and runs."""
    table = read_csv_checked(points, ["attention", "short_conv", "d_model", "successes",
                                      "n_seeds", "chosen_lr", "state_size"],
                             numeric_columns=["short_conv", "d_model", "successes", "n_seeds",
                                              "chosen_lr", "state_size", "median_acc"])
    every = read_csv_checked(runs, ["attention", "short_conv", "d_model", "lr", "test_acc"],
                             numeric_columns=["short_conv", "d_model", "lr", "test_acc",
                                              "duration_s", "state_size"])
    return table, every


def state_size_comparison(point: pd.Series, published: pd.DataFrame,
                          published_runs: pd.DataFrame) -> pd.DataFrame:
    """The subject's `point` (a row of state_size_report.summarize) against every published
    point of its width and short conv: Fisher's exact p of the rates at 90%, its floor at the
    two seed counts, Holm over the column's rows, the published point's median, state and
    machines."""
    column = published[(published["d_model"] == point["d_model"])
                       & (published["short_conv"] == point["short_conv"])
                       & (published["attention"] != point["attention"])]
    k, n = int(point["successes"]), int(point["n_seeds"])
    rows = []
    for other in column.itertuples():
        runs = published_runs[(published_runs["attention"] == other.attention)
                              & (published_runs["d_model"] == other.d_model)
                              & (published_runs["short_conv"] == other.short_conv)
                              & (published_runs["lr"] == other.chosen_lr)]
        rows.append({"attention": other.attention, "label": other.label,
                     "state_size": other.state_size, "successes": int(other.successes),
                     "n_seeds": int(other.n_seeds), "median_acc": other.median_acc,
                     "machines": machines(runs),
                     "p": fisher_exact(k, n, int(other.successes), int(other.n_seeds)),
                     "p_floor": smallest_p(True, n, int(other.n_seeds))})
    table = pd.DataFrame(rows, columns=["attention", "label", "state_size", "successes",
                                        "n_seeds", "median_acc", "machines", "p", "p_floor"])
    table["p_holm"] = holm(list(table["p"])) if len(table) else []
    table["separated"] = table["p"] < ALPHA
    table["separated_after_holm"] = table["p_holm"] < ALPHA
    return table.sort_values(["successes", "median_acc"], ascending=False).reset_index(drop=True)



def published_mixture(path: Path = MIXTURE_RUNS) -> pd.DataFrame:
    """The published mixture runs, a row per run and test setting (mixture.RUN_COLUMNS)."""
    return read_csv_checked(path, list(RUN_COLUMNS),
                            numeric_columns=["seed", "length", "pairs", "acc", "duration_s"])


def mixture_comparison(runs: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """The subject's mixture `runs` (its rows of mixture.RUN_COLUMNS) against every published
    attention at the same positions and test setting: a row per (positions, setting, published
    attention) with both rates, Fisher's exact p, its floor at the two seed counts, Holm within
    the (positions, setting) and where the published runs ran."""
    ours = summarize(runs)
    theirs = summarize(published[published["attention"] != ours["attention"].iloc[0]])
    rows = []
    for point in ours.itertuples():
        column = theirs[(theirs["positions"] == point.positions)
                        & (theirs["length"] == point.length) & (theirs["pairs"] == point.pairs)]
        found = [{"positions": point.positions, "length": point.length, "pairs": point.pairs,
                  "beyond_train": point.beyond_train, "successes": point.successes,
                  "n_seeds": point.n_seeds, "attention": other.attention,
                  "label": other.label, "other_successes": other.successes,
                  "other_n": other.n_seeds, "other_median_acc": other.median_acc,
                  "machines": machines(published[
                      (published["attention"] == other.attention)
                      & (published["positions"] == other.positions)
                      & (published["length"] == other.length)]),
                  "p": fisher_exact(point.successes, point.n_seeds, other.successes,
                                    other.n_seeds),
                  "p_floor": smallest_p(True, point.n_seeds, other.n_seeds)}
                 for other in column.itertuples()]
        for row, p_holm in zip(found, holm([r["p"] for r in found]), strict=True):
            row["p_holm"] = p_holm
            row["separated"] = p_holm < ALPHA
        rows += found
    return pd.DataFrame(rows)
