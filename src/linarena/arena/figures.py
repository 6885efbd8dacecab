"""The card's figures, as PNG bytes (the HTML embeds them as base64, the Markdown links the
files): MQAR recall against state size with the subject drawn over the published points, and
ListOps accuracy against throughput with the subject among the published attentions."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def state_size_figure(ours: pd.DataFrame, published: pd.DataFrame, label: str) -> bytes:
    """One panel per (d_model, short conv) of `ours` (summarize's rows): the published points of
    that column in grey (median test accuracy against state size), the subject in red, with its
    seeds at 90% written beside it."""
    columns = list(ours[["d_model", "short_conv"]].itertuples(index=False, name=None))
    figure, axes = plt.subplots(1, max(len(columns), 1), figsize=(5 * max(len(columns), 1), 4),
                                squeeze=False)
    for ax, (width, conv) in zip(axes[0], columns, strict=False):
        theirs = published[(published["d_model"] == width) & (published["short_conv"] == conv)]
        ax.scatter(theirs["state_size"], 100 * theirs["median_acc"], color="0.6", s=18,
                   label="published points")
        for row in theirs.itertuples():
            ax.annotate(row.label, (row.state_size, 100 * row.median_acc), fontsize=6,
                        color="0.4", xytext=(3, 2), textcoords="offset points")
        mine = ours[(ours["d_model"] == width) & (ours["short_conv"] == conv)]
        ax.scatter(mine["state_size"], 100 * mine["median_acc"], color="tab:red", s=60,
                   marker="*", label=label, zorder=3)
        for row in mine.itertuples():
            ax.annotate(f"{row.successes}/{row.n_seeds}", (row.state_size, 100 * row.median_acc),
                        color="tab:red", xytext=(5, -10), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_title(f"d_model {width}, short conv {conv or 'off'}")
        ax.set_xlabel("state size (numbers, all layers; softmax: KV cache)")
        ax.set_ylabel("MQAR test accuracy (%), median over seeds")
        ax.legend(fontsize=7, loc="lower right")
    return _png(figure)


def throughput_figure(ours: pd.DataFrame, published: pd.DataFrame, label: str) -> bytes:
    """ListOps mean test accuracy against median tokens/s: the published attentions (their
    table's rows) in grey, the subject in red; error bars one sample std over seeds."""
    figure, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.errorbar(published["tokens_per_sec"], 100 * published["mean_acc"],
                yerr=100 * published["std_acc"], fmt="o", color="0.6", ms=4,
                label="published (their machine)")
    for row in published.itertuples():
        ax.annotate(row.label, (row.tokens_per_sec, 100 * row.mean_acc), fontsize=6,
                    color="0.4", xytext=(3, 2), textcoords="offset points")
    ax.errorbar([ours["tokens_per_sec"].median()], [100 * ours["test_acc"].mean()],
                yerr=[100 * ours["test_acc"].std()], fmt="*", color="tab:red", ms=12,
                label=f"{label} (this machine)")
    ax.set_xlabel("tokens/s (training, median over seeds)")
    ax.set_ylabel("ListOps test accuracy (%), mean ± std over seeds")
    ax.legend(fontsize=7)
    return _png(figure)
