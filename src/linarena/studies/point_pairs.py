"""Which points of a study's table do its seeds separate? Fisher's exact test on pairs of points.

A point is a row of a study's point table (mqar_state_size.csv, mqar_mixture.csv): its
coordinates (attention, d_model, short conv; or attention, positions, test setting) and the
seeds that reached SUCCESS_THRESHOLD, k of n (statistics.point_statistics). The pairs tested are
those a reading compares: points that differ in exactly one coordinate, the others equal ("GLA
against RetNet at d_model 16 with the conv"; "softmax with RoPE against softmax without
positions at L256 P64"). A family is one varied coordinate at one value of the others.

Each pair gets Fisher's exact p (the project's rule: a reading says "A recalls more often than
B" only when p < ALPHA, or when the two 95% Wilson intervals do not overlap) and Holm's
adjustment of it within its family, for a reader who compares many pairs of one family at once.
Where the seeds' accuracies are given (the mixture: beyond the training length accuracy falls
by degrees, so a rate at 90% says little where both points have none), each pair also gets the
exact permutation test of the mean accuracy (acc_p; NaN where not given) beside the medians.
Each p has its floor beside it (fisher_p_floor, acc_p_floor): the smallest p the pair's seed
counts allow, so a reader sees when a pair is "not separated" because it has too few seeds
(3 against 3: no outcome gives Fisher's p below 0.1) rather than because its seeds agree.

pair_test is the same two tests on two lists of seeds' accuracies rather than two points: the
test of the sweeps' pairs (scripts/maintainer/pairwise_tests.py) and of the self-pretraining
study's (spt_report), written once so that the study's pairs stay the sweep's.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pandas as pd

from linarena.analysis.statistics import (
    ALPHA,
    SUCCESS_THRESHOLD,
    fisher_exact,
    holm,
    permutation_p_value,
    smallest_p,
)

PAIR_COLUMNS = ("varied", "fixed", "a", "b", "k_a", "n_a", "k_b", "n_b", "rate_a", "rate_b",
                "ci_low_a", "ci_high_a", "ci_low_b", "ci_high_b", "intervals_overlap",
                "fisher_p", "fisher_p_floor", "separated", "p_holm", "separated_after_holm",
                "median_acc_a", "median_acc_b", "acc_p", "acc_p_floor")
POINT_COLUMNS = ("n_seeds", "successes", "success_ci_low", "success_ci_high", "median_acc")
# A point's seeds' test accuracies, keyed by its coordinates' values (in `coordinates` order).
Accuracies = Mapping[tuple, Sequence[float]]


def _text(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def one_coordinate_pairs(points: pd.DataFrame, coordinates: Sequence[str],
                         accuracies: Accuracies | None = None) -> pd.DataFrame:
    """Every pair of `points` (rows with `coordinates` and POINT_COLUMNS) that differ in exactly
    one coordinate, in PAIR_COLUMNS: `varied` names that coordinate, `fixed` the others'
    values ("d_model=16, short_conv=3"), `a` and `b` the varied values, in the table's order;
    acc_p and its floor from `accuracies` (a diverged seed's NaN left out), NaN without them."""
    absent = [c for c in (*coordinates, *POINT_COLUMNS) if c not in points.columns]
    if absent:
        raise ValueError(f"the point table has no column {absent[0]!r}: is it a study's point "
                         "table (mqar_state_size.csv, mqar_mixture.csv)?")
    points = points[points["n_seeds"] > 0]
    rows = []
    for varied in coordinates:
        others = [c for c in coordinates if c != varied]
        for fixed, family in points.groupby(others, sort=False):
            fixed = fixed if isinstance(fixed, tuple) else (fixed,)
            found = [_pair(varied, others, fixed, a, b)
                     | _accuracy_p(coordinates, a, b, accuracies)
                     for (_, a), (_, b) in itertools.combinations(family.iterrows(), 2)]
            for row, adjusted in zip(found, holm([r["fisher_p"] for r in found]), strict=True):
                rows.append(row | {"p_holm": adjusted, "separated_after_holm": adjusted < ALPHA})
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _pair(varied: str, others: Sequence[str], fixed: tuple, a: pd.Series,
          b: pd.Series) -> dict[str, object]:
    k_a, n_a, k_b, n_b = (int(a["successes"]), int(a["n_seeds"]), int(b["successes"]),
                          int(b["n_seeds"]))
    p = fisher_exact(k_a, n_a, k_b, n_b)
    overlap = (a["success_ci_low"] <= b["success_ci_high"]
               and b["success_ci_low"] <= a["success_ci_high"])
    return {"varied": varied,
            "fixed": ", ".join(f"{name}={_text(value)}" for name, value in zip(others, fixed,
                                                                               strict=True)),
            "a": _text(a[varied]), "b": _text(b[varied]), "k_a": k_a, "n_a": n_a, "k_b": k_b,
            "n_b": n_b, "rate_a": k_a / n_a, "rate_b": k_b / n_b,
            "ci_low_a": a["success_ci_low"], "ci_high_a": a["success_ci_high"],
            "ci_low_b": b["success_ci_low"], "ci_high_b": b["success_ci_high"],
            "intervals_overlap": bool(overlap), "fisher_p": p,
            "fisher_p_floor": smallest_p(True, n_a, n_b), "separated": p < ALPHA,
            "median_acc_a": a["median_acc"], "median_acc_b": b["median_acc"]}


def _accuracy_p(coordinates: Sequence[str], a: pd.Series, b: pd.Series,
                accuracies: Accuracies | None) -> dict[str, float]:
    """The permutation test of the two points' mean accuracy over their seeds (acc_p) and its
    floor at their seed counts (acc_p_floor); NaN without `accuracies` or without an accuracy
    on either side."""
    seeds = [[acc for acc in accuracies.get(tuple(point[c] for c in coordinates), ())
              if acc == acc] for point in (a, b)] if accuracies is not None else [[], []]
    if not all(seeds):
        return {"acc_p": float("nan"), "acc_p_floor": float("nan")}
    return {"acc_p": permutation_p_value(*seeds),
            "acc_p_floor": smallest_p(False, len(seeds[0]), len(seeds[1]))}


def pair_test(acc_a: pd.Series, acc_b: pd.Series, rates: bool,
              threshold: float = SUCCESS_THRESHOLD) -> dict:
    """One pair's test on its seeds' test accuracies: with `rates` Fisher's exact test of the
    rates at `threshold` (a failed run, NaN, is a seed below it), else the exact permutation
    test of the mean over the runs with an accuracy; `value_*` is the rate or the mean,
    `p_floor` the smallest p the two seed counts allow."""
    if rates:
        n_a, n_b = len(acc_a), len(acc_b)
        k_a, k_b = int((acc_a >= threshold).sum()), int((acc_b >= threshold).sum())
        return {"test": "fisher", "value_a": k_a / n_a, "value_b": k_b / n_b,
                "p": fisher_exact(k_a, n_a, k_b, n_b), "p_floor": smallest_p(True, n_a, n_b)}
    acc_a, acc_b = acc_a.dropna(), acc_b.dropna()
    return {"test": "permutation", "value_a": acc_a.mean(), "value_b": acc_b.mean(),
            "p": permutation_p_value(list(acc_a), list(acc_b)),
            "p_floor": smallest_p(False, len(acc_a), len(acc_b))}
