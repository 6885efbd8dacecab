"""The statistics of a self-pretraining study's report (spt_report): per arm and attention the
mean test accuracy over seeds with its 95% t-interval (and, with a success threshold, the rate
of seeds at it with its 95% Wilson interval); the pair tests; the spread between attentions per
arm.

The pair tests are the sweep's (point_pairs.pair_test, as scripts/maintainer/pairwise_tests.py
and docs/results/results_pairs.csv): the exact permutation test of the mean accuracy
over seeds (a failed run left out), and with a threshold Fisher's exact test of the rates at it
(a failed run a seed below it); Holm's adjustment within each comparison, across attentions.
The comparisons: SPT against scratch at equal fine-tuning steps, SPT against scratch at equal
total steps, the longer scratch run against the shorter, and every pair of attentions within
each arm (the sweep's own family, on the attentions every arm has).

The spread between attentions of an arm is the standard deviation of their means (and the range
of them), with a 95% percentile bootstrap interval over seeds (each attention's seeds resampled,
seed 0, BOOTSTRAP draws); the difference of two arms' spreads has its own interval.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from linarena.analysis.statistics import ALPHA, SUCCESS_THRESHOLD, holm, point_statistics
from linarena.attention.patterns import pattern_label
from linarena.studies.point_pairs import pair_test
from linarena.studies.spt import ARMS, SCRATCH, SCRATCH_TOTAL, SPT, Protocol
from linarena.studies.spt_runs import split_attentions

# Draws of the bootstrap interval of the spread.
BOOTSTRAP = 2000
# The comparisons between arms: (a, b, what is equal), each one family across attentions.
COMPARISONS = ((SPT, SCRATCH, "equal fine-tuning steps"), (SPT, SCRATCH_TOTAL,
                                                          "equal total steps"),
               (SCRATCH_TOTAL, SCRATCH, "more steps from scratch"))
PAIR_COLUMNS = ("comparison", "attention_a", "arm_a", "attention_b", "arm_b", "n_a", "n_b",
                "test", "value_a", "value_b", "difference", "p", "p_floor", "p_holm",
                "separated")


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean of `values` (NaN with fewer than two)."""
    values = np.asarray([v for v in values if v == v], dtype=float)
    if len(values) < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(values.mean() - half), float(values.mean() + half)


def expected_seeds(runs: pd.DataFrame, protocol: Protocol, names: Sequence[str]
                   ) -> dict[str, int]:
    """The seeds each attention is to have in every arm: the study's, with the more seeds where
    its runs split at the threshold."""
    split = set(split_attentions(runs, protocol, names))
    return {name: len(protocol.seeds) + (len(protocol.more_seeds) if name in split else 0)
            for name in names}


def summarize(runs: pd.DataFrame, protocol: Protocol, names: Sequence[str]) -> pd.DataFrame:
    """One row per arm and attention of `names` (a point without runs has n 0)."""
    expected = expected_seeds(runs, protocol, names)
    threshold = protocol.threshold if protocol.threshold is not None else SUCCESS_THRESHOLD
    rows = []
    for arm in ARMS:
        pretrain, finetune = protocol.steps(arm)
        for name in names:
            seeds = runs[(runs["arm"] == arm) & (runs["attention"] == name)]
            accuracy = seeds["test_acc"].astype(float)
            row = {"task": protocol.task, "arm": arm, "arm_words": protocol.arm_words(arm),
                   "attention": name, "label": pattern_label(name),
                   "pretrain_steps": pretrain, "finetune_steps": finetune,
                   "total_steps": pretrain + finetune,
                   "origin": "+".join(sorted(set(seeds["origin"]))) or None,
                   "n_expected": expected[name], "n": len(seeds),
                   "n_failed": int(seeds["failed"].astype(bool).sum()),
                   "mean_acc": accuracy.mean(), "std_acc": accuracy.std(),
                   "threshold": threshold}
            row["mean_ci_low"], row["mean_ci_high"] = mean_interval(list(accuracy))
            if len(seeds):
                row |= point_statistics(accuracy.reset_index(drop=True), threshold)
            row["pretrain_test_acc_mean"] = seeds["pretrain_test_acc"].astype(float).mean()
            row["duration_s_median"] = seeds["duration_s"].astype(float).median()
            rows.append(row)
    columns = ["task", "arm", "arm_words", "attention", "label", "pretrain_steps",
               "finetune_steps", "total_steps", "origin", "n_expected", "n", "n_failed",
               "mean_acc", "std_acc", "mean_ci_low", "mean_ci_high", "threshold", "n_seeds",
               "successes", "success_rate", "success_ci_low", "success_ci_high", "median_acc",
               "min_acc", "max_acc", "pretrain_test_acc_mean", "duration_s_median"]
    return pd.DataFrame(rows).reindex(columns=columns)


def missing_runs(summary: pd.DataFrame) -> int:
    """The runs the points lack (n_expected - n over the points)."""
    return int((summary["n_expected"] - summary["n"]).clip(lower=0).sum())


def common_attentions(runs: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """The attentions of `names` with an accuracy in every arm that has runs."""
    scored = runs[runs["test_acc"].notna()]
    arms = [arm for arm in ARMS if (scored["arm"] == arm).any()]
    return [name for name in names
            if all(((scored["arm"] == arm) & (scored["attention"] == name)).any()
                   for arm in arms)]


def pairs_table(runs: pd.DataFrame, protocol: Protocol, names: Sequence[str]) -> pd.DataFrame:
    """Every comparison's pairs (PAIR_COLUMNS), Holm-adjusted within each comparison and test:
    the arms of each attention (COMPARISONS), then every pair of the common attentions within
    each arm."""
    def seeds(arm: str, name: str) -> pd.Series:
        chosen = runs[(runs["arm"] == arm) & (runs["attention"] == name)]
        return chosen["test_acc"].astype(float).reset_index(drop=True)

    def usable(arm: str, name: str, rates: bool) -> bool:
        values = seeds(arm, name)
        return len(values) > 0 and (rates or values.notna().any())

    tests = [False, *([True] if protocol.threshold is not None else [])]
    families: list[tuple[str, list[tuple[str, str, str, str]]]] = []
    for a, b, equal in COMPARISONS:
        families.append((f"{a} vs {b}: {equal}", [(name, a, name, b) for name in names]))
    common = common_attentions(runs, names)
    for arm in ARMS:
        families.append((f"attentions within {arm}",
                         [(x, arm, y, arm) for x, y in itertools.combinations(common, 2)]))
    rows = []
    for comparison, pairs in families:
        for rates in tests:
            found = []
            for name_a, arm_a, name_b, arm_b in pairs:
                if not (usable(arm_a, name_a, rates) and usable(arm_b, name_b, rates)):
                    continue
                acc_a, acc_b = seeds(arm_a, name_a), seeds(arm_b, name_b)
                test = pair_test(acc_a, acc_b, rates, protocol.threshold or SUCCESS_THRESHOLD)
                found.append({"comparison": comparison, "attention_a": name_a, "arm_a": arm_a,
                              "attention_b": name_b, "arm_b": arm_b,
                              "n_a": len(acc_a), "n_b": len(acc_b), **test,
                              "difference": test["value_a"] - test["value_b"]})
            for row, adjusted in zip(found, holm([r["p"] for r in found]), strict=True):
                rows.append(row | {"p_holm": adjusted, "separated": adjusted < ALPHA})
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _bootstrap_means(runs: pd.DataFrame, arm: str, names: Sequence[str],
                     rng: np.random.Generator) -> np.ndarray:
    """BOOTSTRAP x len(names): each attention's mean over its seeds resampled."""
    columns = []
    for name in names:
        values = runs[(runs["arm"] == arm) & (runs["attention"] == name)]["test_acc"]
        values = values.dropna().to_numpy(dtype=float)
        draws = rng.integers(0, len(values), size=(BOOTSTRAP, len(values)))
        columns.append(values[draws].mean(axis=1))
    return np.stack(columns, axis=1)


def spread_table(runs: pd.DataFrame, pairs: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """Per arm, the spread of the common attentions' means (std and range, with 95% bootstrap
    intervals) and how many of their pairs the permutation test separates after Holm; then the
    difference of SPT's spread and each scratch arm's."""
    common = common_attentions(runs, names)
    arms = [arm for arm in ARMS if (runs["arm"] == arm).any()]
    columns = ["arm", "attentions", "std", "std_ci_low", "std_ci_high", "range",
               "range_ci_low", "range_ci_high", "pairs", "pairs_separated"]
    if len(common) < 2:
        return pd.DataFrame(columns=columns)
    rng = np.random.default_rng(0)
    draws, rows = {}, []
    for arm in arms:
        means = np.array([runs[(runs["arm"] == arm) & (runs["attention"] == name)]["test_acc"]
                          .dropna().mean() for name in common])
        boot = _bootstrap_means(runs, arm, common, rng)
        draws[arm] = (boot.std(axis=1, ddof=1), boot.max(axis=1) - boot.min(axis=1))
        family = pairs[(pairs["comparison"] == f"attentions within {arm}")
                       & (pairs["test"] == "permutation")]
        rows.append({"arm": arm, "attentions": len(common), "std": means.std(ddof=1),
                     **_interval("std", draws[arm][0]), "range": means.max() - means.min(),
                     **_interval("range", draws[arm][1]), "pairs": len(family),
                     "pairs_separated": int(family["separated"].sum())})
    by_arm = {row["arm"]: row for row in rows}
    for other in (SCRATCH, SCRATCH_TOTAL):
        if SPT in draws and other in draws:
            rows.append({"arm": f"{SPT} - {other}", "attentions": len(common),
                         "std": by_arm[SPT]["std"] - by_arm[other]["std"],
                         **_interval("std", draws[SPT][0] - draws[other][0]),
                         "range": by_arm[SPT]["range"] - by_arm[other]["range"],
                         **_interval("range", draws[SPT][1] - draws[other][1]),
                         "pairs": by_arm[SPT]["pairs"],
                         "pairs_separated": by_arm[SPT]["pairs_separated"]
                         - by_arm[other]["pairs_separated"]})
    return pd.DataFrame(rows, columns=columns)


def _interval(name: str, draws: np.ndarray) -> dict[str, float]:
    low, high = np.percentile(draws, [2.5, 97.5])
    return {f"{name}_ci_low": float(low), f"{name}_ci_high": float(high)}
