"""The README's predictions for the state-size and mixture studies (written before the
reruns, so that a reading cannot be fitted to the result), checked against the published point
tables, one row per comparison.

Each prediction is a set of checks on points (a point: its n seeds and the k that reached
SUCCESS_THRESHOLD, statistics.point_statistics), with one of four verdicts:
- `at_least` (A recalls at least as often as B): "contradicted" when B's rate is higher and
  Fisher's exact test separates them (p < ALPHA), else "held";
- `higher` (A recalls more often than B): "held" when A's rate is higher and p < ALPHA,
  "contradicted" when B's is higher and p < ALPHA, else "not separated";
- `recalls` (A recalls): "held" when the 95% Wilson interval of A's rate lies above 1/2 (most
  seeds reach the threshold, confidently), "contradicted" when it lies below, else "not
  separated";
- `never` (A never recalls, "0/n"): "held" when no seed of A reaches the threshold.
A point missing from the tables (a study not finished) gives "missing", never a verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pandas as pd

from linarena.analysis.statistics import ALPHA, fisher_exact, wilson_interval
from linarena.attention.variants import is_layer, is_linear, is_recurrence

# The layers of prediction 1 and the core each one extends (Based: Taylor linear attention).
LAYER_CORES = {"gla_layer": "gla", "retnet_layer": "retnet", "mamba2_layer": "mamba2",
               "deltanet_layer": "deltanet", "gated_deltanet_layer": "gated_deltanet",
               "based_layer": "taylor"}
DELTA_LAYERS = ("deltanet_layer", "gated_deltanet_layer")   # prediction 2
OTHER_LAYERS = ("gla_layer", "retnet_layer", "mamba2_layer")
COLUMNS = ("prediction", "check", "a", "a_point", "k_a", "n_a", "b", "b_point", "k_b", "n_b",
           "fisher_p", "verdict")


@dataclasses.dataclass(frozen=True)
class Point:
    """A point of a study table: the attention, where (e.g. "d_model 16, short conv 3") and its
    seeds (None: not in the table)."""

    attention: str
    where: str
    k: int | None
    n: int | None


def _verdict_at_least(a: Point, b: Point) -> tuple[str, float]:
    p = fisher_exact(a.k, a.n, b.k, b.n)
    return ("contradicted" if b.k / b.n > a.k / a.n and p < ALPHA else "held"), p


def _verdict_higher(a: Point, b: Point) -> tuple[str, float]:
    p = fisher_exact(a.k, a.n, b.k, b.n)
    if p >= ALPHA or a.k / a.n == b.k / b.n:
        return "not separated", p
    return ("held" if a.k / a.n > b.k / b.n else "contradicted"), p


def _wilson_side(point: Point) -> str:
    low, high = wilson_interval(point.k, point.n)
    return "held" if low > 0.5 else "contradicted" if high < 0.5 else "not separated"


def check(prediction: int, name: str, a: Point, b: Point | None = None) -> dict:
    """One row of COLUMNS: check `name` ("at_least", "higher", "recalls", "never") of a (against
    b for the comparisons)."""
    row = {"prediction": prediction, "check": name, "a": a.attention, "a_point": a.where,
           "k_a": a.k, "n_a": a.n, "b": b.attention if b else None,
           "b_point": b.where if b else None,
           "k_b": b.k if b else None, "n_b": b.n if b else None, "fisher_p": None}
    if a.n is None or (b is not None and b.n is None):
        return row | {"verdict": "missing"}
    if name == "recalls":
        return row | {"verdict": _wilson_side(a)}
    if name == "never":
        return row | {"verdict": "held" if a.k == 0 else "contradicted"}
    compare: Callable[[Point, Point], tuple[str, float]] = (
        _verdict_at_least if name == "at_least" else _verdict_higher)
    verdict, p = compare(a, b)
    return row | {"verdict": verdict, "fisher_p": p}


def state_size_point(table: pd.DataFrame, attention: str, conv: int, width: int) -> Point:
    """The point of mqar_state_size.csv at (attention, short conv, d_model)."""
    rows = table[(table["attention"] == attention) & (table["short_conv"] == conv)
                 & (table["d_model"] == width)]
    where = f"d_model {width}, short conv {conv}"
    if rows.empty:
        return Point(attention, where, None, None)
    row = rows.iloc[0]
    return Point(attention, where, int(row["successes"]), int(row["n_seeds"]))


def state_size_checks(table: pd.DataFrame, widths: list[int], convs: list[int]) -> list[dict]:
    """Predictions 1-5 on the state-size study's point table (mqar_state_size.csv) at the
    grid's `widths` and short-conv settings `convs` (a point the table lacks: "missing")."""
    widths, convs = sorted(widths), sorted(convs, reverse=True)
    on = convs[0]

    def at(name: str, conv: int, width: int) -> Point:
        return state_size_point(table, name, conv, width)

    rows = []
    for width in widths:
        for layer, core in LAYER_CORES.items():  # 1: a layer (its own conv) against its core
            rows.append(check(1, "at_least", at(layer, 0, width), at(core, on, width)))
    for delta in DELTA_LAYERS:                   # 2: the delta rule at the smallest state
        for other in OTHER_LAYERS:
            rows.append(check(2, "higher", at(delta, 0, widths[0]), at(other, 0, widths[0])))
    rows += [check(3, "recalls", at("based_layer", 0, width)) for width in widths]
    rows += [check(4, "never", at("swa", conv, width)) for conv in convs for width in widths]
    for conv in convs:                           # 5: the hybrids
        for width in widths:
            softmax = at("softmax", conv, width)
            if softmax.n is None or _wilson_side(softmax) == "held":
                rows.append(check(5, "recalls", at("gated_deltanet+softmax", conv, width)))
            rows.append(check(5, "at_least", at("gated_deltanet", conv, width),
                              at("gated_deltanet+swa", conv, width)))
    return rows


def mixture_checks(table: pd.DataFrame) -> list[dict]:
    """Prediction 6 on the mixture's point table (mqar_mixture.csv, positions none and rope):
    softmax and the recurrences recall more often without position codes than with rotary
    ones at twice the training length; no linear attention recalls at four times it."""
    longest = int(table.loc[~table["beyond_train"].astype(bool), "length"].max())

    def at(name: str, positions: str, length: int) -> Point:
        rows = table[(table["attention"] == name) & (table["positions"] == positions)
                     & (table["length"] == length)]
        where = f"positions {positions}, length {length}"
        if rows.empty:
            return Point(name, where, None, None)
        return Point(name, where + f" ({int(rows.iloc[0]['pairs'])} pairs)",
                     int(rows.iloc[0]["successes"]), int(rows.iloc[0]["n_seeds"]))

    names = list(dict.fromkeys(table["attention"]))
    rows = [check(6, "higher", at(name, "none", 2 * longest), at(name, "rope", 2 * longest))
            for name in names if name == "softmax" or is_recurrence(name) or is_layer(name)]
    rows += [check(6, "never", at(name, positions, 4 * longest))
             for name in names if is_linear(name) for positions in ("none", "rope")]
    return rows


def predictions_table(state_size: pd.DataFrame | None, grid: dict[str, Any],
                      mixture: pd.DataFrame | None) -> pd.DataFrame:
    """Every check of the predictions whose study table is given, in COLUMNS; `grid`: the
    state-size study's (preset.load_grid)."""
    rows = [] if state_size is None else state_size_checks(
        state_size, [int(w) for w in grid["widths"]], [int(c) for c in grid["short_conv"]])
    rows += [] if mixture is None else mixture_checks(mixture)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary_lines(table: pd.DataFrame) -> list[str]:
    """Per prediction: how many checks held, were contradicted, not separated or missing."""
    lines = []
    for prediction, group in table.groupby("prediction"):
        counts = group["verdict"].value_counts()
        parts = [f"{counts[v]} {v}" for v in ("held", "contradicted", "not separated", "missing")
                 if v in counts]
        lines.append(f"prediction {prediction}: {len(group)} checks, {', '.join(parts)}")
    return lines
