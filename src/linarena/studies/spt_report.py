"""The report of a self-pretraining study (spt_study): its tables (spt_statistics: per arm and
attention the mean test accuracy over seeds with its interval, the pair tests, the spread
between attentions per arm) as CSV and Markdown, the caption with the prediction stated before
the runs and its clauses checked (spt_predictions), the masked-token accuracy that needs no
context (spt_baseline), and the figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from linarena.analysis.plots import save_figure
from linarena.analysis.provenance import training_note
from linarena.analysis.statistics import ALPHA
from linarena.attention.patterns import pattern_label
from linarena.studies.declaration import Report
from linarena.studies.spt import ARMS, SCRATCH, SCRATCH_TOTAL, SPT, Protocol
from linarena.studies.spt_baseline import baseline_line
from linarena.studies.spt_predictions import PREDICTIONS, STATED, verdict_lines, verdicts
from linarena.studies.spt_statistics import (
    COMPARISONS,
    missing_runs,
    pairs_table,
    spread_table,
    summarize,
)

ARM_COLORS = {SCRATCH: "#7f7f7f", SPT: "#d62728", SCRATCH_TOTAL: "#1f77b4"}


def _pct(value: float) -> str:
    return "–" if value != value else f"{100 * value:.1f}"


def _cell(point: pd.Series, rates: bool) -> str:
    """'39.8 [39.1, 40.5]' (mean and t-interval, %), with the seeds it lacks and those that
    diverged, and 'k/n' at the threshold for rates."""
    if not point["n"]:
        return "not run"
    text = "–" if point["mean_acc"] != point["mean_acc"] else \
        f"{_pct(point['mean_acc'])} [{_pct(point['mean_ci_low'])}, {_pct(point['mean_ci_high'])}]"
    notes = []
    if point["n"] < point["n_expected"]:
        notes.append(f"{int(point['n'])} of {int(point['n_expected'])} seeds")
    if point["n_failed"]:
        notes.append(f"{int(point['n_failed'])} diverged")
    if notes:
        text += f" ({'; '.join(notes)})"
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


def diverged_note(runs: pd.DataFrame, protocol: Protocol) -> str:
    """The runs that diverged (no test accuracy), each with the stage and step it diverged by:
    'HGRN2 layer, SPT, 300 + 300 steps, seed 2 (pretraining, by step 100)'."""
    failed = runs[runs["failed"].astype(bool)].sort_values(["attention", "arm", "seed"])
    if not len(failed):
        return ""
    where = []
    for run in failed.itertuples():
        pretrain, steps = int(run.pretrain_steps), int(run.total_steps)
        stage = ("training" if not pretrain else
                 "pretraining" if steps <= pretrain else "fine-tuning")
        step = steps - pretrain if stage == "fine-tuning" else steps
        where.append(f"{pattern_label(run.attention)}, {protocol.arm_words(run.arm)}, seed "
                     f"{run.seed} ({stage}, by step {step})")
    return (f"**{len(failed)} runs diverged** (their weights turned non-finite; no test "
            "accuracy): " + "; ".join(where) + ". Each is counted in its cell's seeds and left "
            "out of its mean, its interval and the permutation tests, as the published sweep's "
            "readings do"
            + (", and is a seed below the threshold in the rates and Fisher's tests"
               if protocol.threshold is not None else "")
            + "; a mean over the seeds that survived says nothing of those that did not.\n\n")


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
            spread: pd.DataFrame, checked: pd.DataFrame, baseline: pd.DataFrame,
            protocol: Protocol, names: Sequence[str], name: str) -> str:
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
        f"**Prediction, stated {STATED}:** {prediction}\n\n" + verdict_lines(checked, name) +
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
        + training_note(runs, f"{name}_runs.csv") + diverged_note(runs, protocol)
        + accuracy_table(summary, pairs, protocol, names) + "\n" + baseline_line(baseline, name)
        + "\nSpread between attentions (the attentions every arm has; "
        f"{name}_spread.csv):\n\n" + spread_lines(spread))


def spt_figure(summary: pd.DataFrame, runs: pd.DataFrame, protocol: Protocol,
               names: Sequence[str], heading: str) -> Figure:
    """Per attention, each arm's mean test accuracy with its 95% t-interval and every seed as a
    dot (a diverged seed counted at the panel's foot), scratch beside SPT; below, with a
    threshold, each arm's rate at it with its Wilson interval."""
    rates = protocol.threshold is not None
    fig = Figure(figsize=(max(8.0, 0.75 * len(names) + 3), 7.5 if rates else 5.2))
    axes = fig.subplots(2 if rates else 1, 1, sharex=True, squeeze=False,
                        height_ratios=[1.4, 1] if rates else None)[:, 0]
    x = np.arange(len(names))
    offsets = dict(zip(ARMS, (-0.25, 0.0, 0.25), strict=True))
    foot = blended_transform_factory(axes[0].transData, axes[0].transAxes)
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
            seeds = runs[(runs["arm"] == arm) & (runs["attention"] == name)]
            axes[0].scatter(np.full(len(seeds), where[i]) + 0.06,
                            100 * seeds["test_acc"].astype(float), s=8, color=ARM_COLORS[arm],
                            alpha=0.45, linewidths=0)
            diverged = int(seeds["failed"].astype(bool).sum())
            if diverged:
                # No accuracy to plot: a cross at the foot of the panel, the count beside it.
                axes[0].text(where[i], 0.015, f"×{diverged}", transform=foot,
                             color=ARM_COLORS[arm], ha="center", va="bottom", fontsize=8,
                             fontweight="bold")
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
    if runs["failed"].astype(bool).any():
        low, high = axes[0].get_ylim()
        axes[0].set_ylim(low - 0.08 * (high - low), high)  # room for the counts at the foot
        axes[0].plot([], [], linestyle="none", marker="$×$", color="black",
                     label="×k: k seeds diverged (no accuracy)")
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
                 runs: pd.DataFrame, baseline: pd.DataFrame) -> Report:
    """The Report of a study's runs: <name>_runs.csv, <name>.csv, <name>_pairs.csv,
    <name>_spread.csv, <name>_verdicts.csv (the prediction's clauses), <name>.md, <name>.png
    and <name>_masked_baseline.csv (`baseline`: spt_baseline.masked_token_baselines)."""
    summary = summarize(runs, protocol, names)
    pairs = pairs_table(runs, protocol, names)
    spread = spread_table(runs, pairs, names)
    partial = missing_runs(summary) > 0
    checked = verdicts(summary, pairs, spread, protocol, partial)
    heading = title(protocol, partial) + f"\nexperiment={protocol.preset}: {protocol.model}"

    def figure(path: Path) -> None:
        save_figure(spt_figure(summary, runs, protocol, names, heading), path)

    outputs = {"_runs.csv": runs, ".csv": summary, "_pairs.csv": pairs, "_spread.csv": spread,
               "_verdicts.csv": checked,
               ".md": caption(runs, summary, pairs, spread, checked, baseline, protocol, names,
                              name),
               ".png": figure, "_masked_baseline.csv": baseline}
    return Report(outputs, lambda paths: f"{len(runs)} runs -> {paths[1]}, {paths[5]}, "
                  f"{paths[6]}" + (f" (partial: {missing_runs(summary)} runs missing)"
                                   if partial else ""))
