"""The card's figures, as PNG bytes (the HTML embeds them as base64, the Markdown links the
files): MQAR recall against state size with the subject drawn over the published points, and
ListOps accuracy against throughput with the subject among the published attentions."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


# Where a point's label may go, tried in order (offset in points, horizontal alignment): right
# and up first, as a reader expects; the others only where that spot is taken.
LABEL_SPOTS = [((3, 2), "left"), ((3, -8), "left"), ((-3, 2), "right"), ((-3, -8), "right"),
               *(((dx, dy), align) for dy in (9, -15, 16, -22, 23, -29)
                 for dx, align in ((3, "left"), (-3, "right")))]


def label_points(ax: Axes, xs: Sequence[float], ys: Sequence[float], labels: Sequence[str],
                 avoid: Sequence[Artist] = ()) -> None:
    """Write each label beside its point (grey, small) in the first of LABEL_SPOTS inside the
    axes where it overlaps no label written before it nor any artist of `avoid` (text already
    on the axes); where every spot clashes, in the one with the fewest clashes (crowded
    published points stay readable where they can be, and are never dropped). Points that
    coincide on the page (within 4 pixels) get one label naming them all."""
    ax.figure.canvas.draw()  # fixes the axes' limits, which place the labels on the page
    renderer = ax.figure.canvas.get_renderer()
    groups: dict[tuple[int, int], list] = {}
    for x, y, text in zip(xs, ys, labels, strict=True):
        px, py = ax.transData.transform((x, y))
        groups.setdefault((round(px / 4), round(py / 4)), [x, y, []])[2].append(text)
    taken = [artist.get_window_extent(renderer) for artist in avoid]
    inside = ax.get_window_extent(renderer)
    for x, y, texts in groups.values():
        text = textwrap.fill(", ".join(texts), 32)  # long shared labels: lines, not a banner
        best = None
        for offset, align in LABEL_SPOTS:
            note = ax.annotate(text, (x, y), fontsize=6, color="0.4", xytext=offset,
                               textcoords="offset points", ha=align)
            box = note.get_window_extent(renderer)
            note.remove()
            clashes = (not _within(box, inside), sum(box.overlaps(other) for other in taken))
            if best is None or clashes < best[0]:
                best = (clashes, offset, align, box)
            if clashes == (False, 0):
                break
        _, offset, align, box = best
        # a label beyond the first ring of spots gets a thin line to its point
        line = {"arrowstyle": "-", "color": "0.75", "lw": 0.5} if abs(offset[1]) > 9 else None
        ax.annotate(text, (x, y), fontsize=6, color="0.4", xytext=offset,
                    textcoords="offset points", ha=align, arrowprops=line)
        taken.append(box)


def _within(box, outer) -> bool:
    return (box.x0 >= outer.x0 and box.x1 <= outer.x1 and box.y0 >= outer.y0
            and box.y1 <= outer.y1)


def state_size_figure(ours: pd.DataFrame, published: pd.DataFrame, label: str) -> bytes:
    """One panel per (d_model, short conv) of `ours` (summarize's rows): the published points of
    that column in grey (median test accuracy against state size), the subject in red, with its
    seeds at 90% written beside it."""
    columns = list(ours[["d_model", "short_conv"]].itertuples(index=False, name=None))
    figure, axes = plt.subplots(1, max(len(columns), 1), figsize=(5 * max(len(columns), 1), 4.5),
                                squeeze=False)
    for ax, (width, conv) in zip(axes[0], columns, strict=False):
        theirs = published[(published["d_model"] == width) & (published["short_conv"] == conv)]
        ax.scatter(theirs["state_size"], 100 * theirs["median_acc"], color="0.6", s=18,
                   label="published points")
        mine = ours[(ours["d_model"] == width) & (ours["short_conv"] == conv)]
        ax.scatter(mine["state_size"], 100 * mine["median_acc"], color="tab:red", s=60,
                   marker="*", label=label, zorder=3)
        ax.set_xscale("log")
        ax.margins(x=0.08, y=0.12)  # room for the labels of the points at the edges
        counts = [ax.annotate(f"{row.successes}/{row.n_seeds}",
                              (row.state_size, 100 * row.median_acc), color="tab:red",
                              xytext=(5, -10), textcoords="offset points")
                  for row in mine.itertuples()]
        label_points(ax, theirs["state_size"], 100 * theirs["median_acc"], theirs["label"],
                     counts)
        ax.set_title(f"d_model {width}, short conv {conv or 'off'}")
        ax.set_xlabel("state size (numbers, all layers; softmax: KV cache)")
        ax.set_ylabel("MQAR test accuracy (%), median over seeds")
        ax.legend(fontsize=7, loc="best")
    return _png(figure)


def throughput_figure(ours: pd.DataFrame, published: pd.DataFrame, label: str) -> bytes:
    """ListOps mean test accuracy against median tokens/s: the published attentions (their
    table's rows) in grey, the subject in red; error bars one sample std over seeds."""
    figure, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.errorbar(published["tokens_per_sec"], 100 * published["mean_acc"],
                yerr=100 * published["std_acc"], fmt="o", color="0.6", ms=4,
                label="published (their machine)")
    ax.errorbar([ours["tokens_per_sec"].median()], [100 * ours["test_acc"].mean()],
                yerr=[100 * ours["test_acc"].std()], fmt="*", color="tab:red", ms=12,
                label=f"{label} (this machine)")
    label_points(ax, published["tokens_per_sec"], 100 * published["mean_acc"],
                 published["label"])
    ax.set_xlabel("tokens/s (training, median over seeds)")
    ax.set_ylabel("ListOps test accuracy (%), mean ± std over seeds")
    ax.legend(fontsize=7)
    return _png(figure)
