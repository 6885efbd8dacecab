"""The report of a self-pretraining study (spt_study): per arm and attention the mean test
accuracy over seeds with its 95% t-interval (and, with a success threshold, the rate of seeds at
it with its 95% Wilson interval); the pair tests; the spread between attentions per arm; the
caption with the prediction stated before the runs; the figure.

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
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from linarena.analysis.plots import save_figure
from linarena.analysis.provenance import training_note
from linarena.analysis.statistics import (
    ALPHA,
    SUCCESS_THRESHOLD,
    holm,
    point_statistics,
)
from linarena.attention.patterns import pattern_label
from linarena.studies.declaration import Report
from linarena.studies.point_pairs import pair_test
from linarena.studies.spt import ARMS, SCRATCH, SCRATCH_TOTAL, SPT, Protocol, split_attentions

# The predictions, written before any run of the study (the docs' notes say the same): a
# reading checks them against the tests, never the other way round.
STATED = "2026-12-06, before any run of this study"
PREDICTIONS = {
    "spt/listops_small": (
        "SPT narrows the spread between attentions on ListOps: with SPT the standard deviation "
        "of the attentions' mean accuracies is smaller than from scratch at equal fine-tuning "
        "steps (its bootstrap interval of the difference below 0), and fewer pairs of "
        "attentions are separated (Holm) than from scratch. At equal fine-tuning steps SPT "
        "raises the mean accuracy of most attentions; at equal total steps (from scratch, "
        "P + F steps) most of that gain is matched, so few attentions are separated there."),
    "spt/pathfinder_small": (
        "At this budget (200 fine-tuning steps of 16 images) every attention stays at chance "
        "from scratch: no seed reaches 60% test accuracy, at 200 or at 400 steps. SPT lifts "
        "at most a few seeds above it, so no attention's rate at 60% is separated between SPT "
        "and scratch (Fisher, Holm); if some are, the finding is that SPT lifts those."),
}
# Draws of the bootstrap interval of the spread.
BOOTSTRAP = 2000
ARM_COLORS = {SCRATCH: "#7f7f7f", SPT: "#d62728", SCRATCH_TOTAL: "#1f77b4"}
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


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.1f}"


def _cell(point: pd.Series, rates: bool) -> str:
    """'39.8 [39.1, 40.5]' (mean and t-interval, %), with 'k/n' at the threshold for rates."""
    if not point["n"]:
        return "not run"
    text = f"{_pct(point['mean_acc'])} [{_pct(point['mean_ci_low'])}, " \
           f"{_pct(point['mean_ci_high'])}]"
    if point["n"] < point["n_expected"]:
        text += f" ({int(point['n'])} of {int(point['n_expected'])} seeds)"
    if rates:
        text += f"; {int(point['successes'])}/{int(point['n_seeds'])}"
    return text


def _difference(pairs: pd.DataFrame, comparison: str, name: str, tests: Sequence[str]) -> str:
    """'+1.2 (p 0.03) **separated**' per test: the difference (points) and its Holm p."""
    cells = []
    for test in tests:
        row = pairs[(pairs["comparison"] == comparison) & (pairs["attention_a"] == name)
                    & (pairs["test"] == test)]
        if not len(row):
            cells.append("–")
            continue
        row = row.iloc[0]
        mark = " **separated**" if row["separated"] else ""
        cells.append(f"{100 * row['difference']:+.1f} (p {row['p_holm']:.2g}){mark}")
    return "; ".join(cells)


def accuracy_table(summary: pd.DataFrame, pairs: pd.DataFrame, protocol: Protocol,
                   names: Sequence[str]) -> str:
    """The Markdown table: each arm's mean [t-interval] per attention, and the differences
    with their Holm-adjusted p."""
    rates = protocol.threshold is not None
    tests = ["fisher", "permutation"] if rates else ["permutation"]
    what = (f"rate at {protocol.threshold:g}; mean (points)" if rates else "mean (points)")
    head = [f"{protocol.arm_words(arm)}" for arm in ARMS]
    lines = ["| attention | " + " | ".join(head)
             + f" | SPT − scratch {protocol.finetune_steps}: {what} (p Holm) "
             + f"| SPT − scratch {protocol.total_steps(SCRATCH_TOTAL)}: {what} (p Holm) "
             + "| masked-token test acc. (%) |",
             "|" + "---|" * (len(ARMS) + 4)]
    for name in names:
        cells = []
        for arm in ARMS:
            point = summary[(summary["arm"] == arm) & (summary["attention"] == name)].iloc[0]
            cells.append(_cell(point, rates))
        spt = summary[(summary["arm"] == SPT) & (summary["attention"] == name)].iloc[0]
        lines.append(
            f"| {pattern_label(name)} | " + " | ".join(cells) + " | "
            + _difference(pairs, f"{SPT} vs {SCRATCH}: {COMPARISONS[0][2]}", name, tests)
            + " | "
            + _difference(pairs, f"{SPT} vs {SCRATCH_TOTAL}: {COMPARISONS[1][2]}", name, tests)
            + f" | {_pct(spt['pretrain_test_acc_mean'])} |")
    return "\n".join(lines) + "\n"


def spread_lines(spread: pd.DataFrame) -> str:
    if not len(spread):
        return "Spread between attentions: fewer than two attentions in every arm yet.\n"
    lines = ["| arm | attentions | std of the means (95% bootstrap) | range of the means | "
             "pairs separated (permutation, Holm) |", "|---|---|---|---|---|"]
    for row in spread.itertuples():
        lines.append(f"| {row.arm} | {row.attentions} | {_pct(row.std)} [{_pct(row.std_ci_low)}"
                     f", {_pct(row.std_ci_high)}] | {_pct(row.range)} [{_pct(row.range_ci_low)}"
                     f", {_pct(row.range_ci_high)}] | {row.pairs_separated} of {row.pairs} |")
    return "\n".join(lines) + "\n"


def title(protocol: Protocol, partial: bool) -> str:
    return (f"Self-pretraining on {protocol.task}: from scratch against SPT "
            f"({protocol.pretrain_steps} masked-token + {protocol.finetune_steps} steps)"
            + (" — PARTIAL" if partial else ""))


def caption(runs: pd.DataFrame, summary: pd.DataFrame, pairs: pd.DataFrame,
            spread: pd.DataFrame, protocol: Protocol, names: Sequence[str], name: str) -> str:
    missing = missing_runs(summary)
    partial = missing > 0
    expected = int(summary["n_expected"].sum())
    prediction = PREDICTIONS.get(protocol.preset, "none was stated for this preset.")
    published = runs[runs["origin"] == "published"]
    source = (f"; the scratch arm's {len(published)} runs are the published sweep's rows "
              f"({protocol.published.name}, never retrained), the others trained here"
              if protocol.published is not None else "")
    rates = (f" A seed learns the task at {protocol.threshold:g} test accuracy; a point's rate "
             "of such seeds has its 95% Wilson interval, and an attention whose seeds split at "
             f"it in any arm gets seeds {list(protocol.more_seeds)} in every arm."
             if protocol.threshold is not None else "")
    state = (f"**PARTIAL: {expected - missing} of {expected} runs finished**; the command "
             "that trained them (provenance.json) continues the study, in another session "
             f"with `--resume-from` this {name}_runs.csv.\n\n" if partial else "")
    return (
        f"# {title(protocol, partial)}\n\n{state}"
        f"**Prediction, stated {STATED}:** {prediction}\n\n"
        f"Protocol: experiment={protocol.preset} ({protocol.model}); {len(names)} attentions, "
        f"seeds {list(protocol.seeds)}, three arms: from scratch at {protocol.finetune_steps} "
        f"steps; SPT, {protocol.pretrain_steps} steps of masked-token pretraining "
        f"({100 * protocol.mask_fraction:g}% of the real tokens) on the task's own training "
        f"inputs, then {protocol.finetune_steps} of fine-tuning; from scratch at "
        f"{protocol.total_steps(SCRATCH_TOTAL)} steps (SPT's total){source}.{rates} A cell is "
        "the mean test accuracy over seeds (%) with its 95% t-interval. Each difference is "
        "tested as the published sweep's pairs are (results_pairs.csv): the exact permutation "
        "test of the mean"
        + (", and Fisher's exact test of the rates" if protocol.threshold is not None else "")
        + ", Holm-adjusted across attentions within each comparison; **separated** is an "
        f"adjusted p < {ALPHA}, and nothing else is called a difference ({name}_pairs.csv, "
        f"with each p's floor at its seed counts).\n\n"
        + training_note(runs, f"{name}_runs.csv") + accuracy_table(summary, pairs, protocol,
                                                                   names)
        + "\nSpread between attentions (the attentions every arm has; "
        f"{name}_spread.csv):\n\n" + spread_lines(spread))


def spt_figure(summary: pd.DataFrame, runs: pd.DataFrame, protocol: Protocol,
               names: Sequence[str], heading: str) -> Figure:
    """Per attention, each arm's mean test accuracy with its 95% t-interval and every seed as a
    dot, scratch beside SPT; below, with a threshold, each arm's rate at it with its Wilson
    interval."""
    rates = protocol.threshold is not None
    fig = Figure(figsize=(max(8.0, 0.75 * len(names) + 3), 7.5 if rates else 5.2))
    axes = fig.subplots(2 if rates else 1, 1, sharex=True, squeeze=False,
                        height_ratios=[1.4, 1] if rates else None)[:, 0]
    x = np.arange(len(names))
    offsets = dict(zip(ARMS, (-0.25, 0.0, 0.25), strict=True))
    for arm in ARMS:
        points = summary[summary["arm"] == arm].set_index("attention").reindex(names)
        where = x + offsets[arm]
        mean = 100 * points["mean_acc"].astype(float)
        low = (mean - 100 * points["mean_ci_low"].astype(float)).clip(lower=0)
        high = (100 * points["mean_ci_high"].astype(float) - mean).clip(lower=0)
        axes[0].errorbar(where, mean, yerr=[low.fillna(0), high.fillna(0)], fmt="o",
                         color=ARM_COLORS[arm], markersize=5, capsize=3, linewidth=1.2,
                         label=protocol.arm_words(arm))
        for i, name in enumerate(names):
            seeds = runs[(runs["arm"] == arm) & (runs["attention"] == name)]["test_acc"]
            axes[0].scatter(np.full(len(seeds), where[i]) + 0.06, 100 * seeds.astype(float),
                            s=8, color=ARM_COLORS[arm], alpha=0.45, linewidths=0)
        if rates:
            rate = 100 * points["success_rate"].astype(float)
            axes[1].errorbar(where, rate,
                             yerr=[(rate - 100 * points["success_ci_low"]).fillna(0),
                                   (100 * points["success_ci_high"] - rate).fillna(0)],
                             fmt="s", color=ARM_COLORS[arm], markersize=4, capsize=3)
    if protocol.chance is not None:
        axes[0].axhline(100 * protocol.chance, color="black", linestyle=":", linewidth=1,
                        label=f"chance ({100 * protocol.chance:g}%)")
    if rates:
        axes[0].axhline(100 * protocol.threshold, color="black", linestyle="--", linewidth=0.8,
                        alpha=0.6, label=f"threshold ({100 * protocol.threshold:g}%)")
    axes[0].set_ylabel("test accuracy (%): mean, 95% t-interval; dots: seeds")
    axes[0].legend(fontsize=8, loc="best")
    if rates:
        axes[1].set_ylabel(f"seeds at {100 * protocol.threshold:g}% (%), 95% Wilson")
        axes[1].set_ylim(-3, 103)
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xticks(x, [pattern_label(name) for name in names], rotation=40, ha="right",
                        fontsize=8)
    fig.suptitle(heading, fontsize=10)
    return fig


def study_report(name: str, protocol: Protocol, names: Sequence[str],
                 runs: pd.DataFrame) -> Report:
    """The Report of a study's runs: <name>_runs.csv, <name>.csv, <name>_pairs.csv,
    <name>_spread.csv, <name>.md and <name>.png."""
    summary = summarize(runs, protocol, names)
    pairs = pairs_table(runs, protocol, names)
    spread = spread_table(runs, pairs, names)
    partial = missing_runs(summary) > 0
    heading = title(protocol, partial) + f"\nexperiment={protocol.preset}: {protocol.model}"

    def figure(path: Path) -> None:
        save_figure(spt_figure(summary, runs, protocol, names, heading), path)

    outputs = {"_runs.csv": runs, ".csv": summary, "_pairs.csv": pairs, "_spread.csv": spread,
               ".md": caption(runs, summary, pairs, spread, protocol, names, name),
               ".png": figure}
    return Report(outputs, lambda paths: f"{len(runs)} runs -> {paths[1]}, {paths[4]}, "
                  f"{paths[5]}" + (f" (partial: {missing_runs(summary)} runs missing)"
                                   if partial else ""))
