"""The statistics of a study's point, written once: success rates with 95% Wilson intervals,
Fisher's exact test, and the median and range of the test accuracy over seeds.

A seed succeeds when its test accuracy reaches SUCCESS_THRESHOLD. A diverged seed (no accuracy,
NaN) counts among the n seeds, never among the successes, and is left out of the median, min
and max. With few seeds a rate says little: 3 of 3 is compatible with a true rate of 0.44
(Wilson, 95%), which is why every point table carries the interval beside the rate.

It lives in analysis (the lower layer), not studies: compare.py's tables (analysis.table) and
the README's tables use it as the studies do.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

# A seed "recalls" when its test accuracy reaches this (the tables' "2/3").
SUCCESS_THRESHOLD = 0.9
# Tasks whose outcome is recall, a seed reaching SUCCESS_THRESHOLD or not: their results are
# rates (point_statistics, fisher_exact), not means of a bimodal accuracy.
RECALL_TASKS = ("mqar",)
# The normal quantile of a two-sided 95% interval.
Z_95 = 1.96
# The significance level of every test the readings rest on (Fisher's, the permutation test,
# after Holm's adjustment where several pairs are tested): below it, two points are separated.
ALPHA = 0.05
# The columns point_statistics adds to a point's row, in this order.
STATISTICS_COLUMNS = ("n_seeds", "successes", "success_rate", "success_ci_low",
                      "success_ci_high", "median_acc", "min_acc", "max_acc")
# Two tables of Fisher's test whose probabilities differ by less than this relative amount are
# equally extreme (floating-point noise in the products must not drop the observed table).
_FISHER_REL_TOL = 1e-7


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a success rate k/n:
    (k + z^2/2)/(n + z^2) -/+ z sqrt(k(n-k)/n + z^2/4)/(n + z^2), clipped to [0, 1].

    Unlike k/n -/+ z sqrt(p(1-p)/n) it does not collapse to a point at k = 0 or k = n, which is
    where most points of a small-seed study sit."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"a rate needs 0 <= successes <= n and n > 0, not {successes} of {n}")
    centre = (successes + z * z / 2) / (n + z * z)
    half = z * math.sqrt(successes * (n - successes) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher_exact(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float:
    """The two-sided p-value of Fisher's exact test that two points have one success rate: the
    probability, with both points' n and the total successes fixed, of a 2x2 table as likely as
    the observed one or less (the convention of scipy.stats.fisher_exact)."""
    for k, n in ((successes_a, n_a), (successes_b, n_b)):
        if n <= 0 or not 0 <= k <= n:
            raise ValueError(f"a rate needs 0 <= successes <= n and n > 0, not {k} of {n}")
    total_successes = successes_a + successes_b
    total = n_a + n_b

    def probability(k_a: int) -> float:
        """Hypergeometric: k_a of point a's n_a seeds among the total_successes."""
        return (math.comb(n_a, k_a) * math.comb(n_b, total_successes - k_a)
                / math.comb(total, total_successes))

    observed = probability(successes_a)
    possible = range(max(0, total_successes - n_b), min(n_a, total_successes) + 1)
    p_value = sum(p for k_a in possible
                  if (p := probability(k_a)) <= observed * (1 + _FISHER_REL_TOL))
    return min(1.0, p_value)


def point_statistics(accuracies: pd.Series, threshold: float = SUCCESS_THRESHOLD) -> dict:
    """The STATISTICS_COLUMNS of one point from its seeds' test accuracies (NaN: diverged)."""
    n = len(accuracies)
    successes = int((accuracies >= threshold).sum())
    low, high = wilson_interval(successes, n)
    return {"n_seeds": n, "successes": successes, "success_rate": successes / n,
            "success_ci_low": low, "success_ci_high": high,
            "median_acc": accuracies.median(), "min_acc": accuracies.min(),
            "max_acc": accuracies.max()}


@functools.lru_cache(maxsize=32)
def _splits(n: int, n_a: int) -> np.ndarray:
    """Every way to choose n_a of n indices, one row each (C(n, n_a) x n_a)."""
    return np.array(list(itertools.combinations(range(n), n_a)), dtype=np.intp)


def permutation_p_value(a: Sequence[float], b: Sequence[float],
                        max_splits: int = 1_000_000) -> float:
    """The two-sided exact permutation test that two groups of seeds have one mean accuracy:
    the share of the C(n_a + n_b, n_a) ways to split the pooled values into groups of those
    sizes whose |difference of means| is at least the observed one. For accuracies that are
    not rates (no threshold), with no assumption on their distribution."""
    pooled, n_a, n_b = np.array([*a, *b], dtype=np.float64), len(a), len(b)
    if not n_a or not n_b:
        raise ValueError(f"each group needs a value, not {n_a} and {n_b}")
    if math.comb(n_a + n_b, n_a) > max_splits:
        raise ValueError(f"{n_a} against {n_b} values: too many splits to enumerate")
    total = pooled.sum()
    observed = abs(pooled[:n_a].sum() / n_a - pooled[n_a:].sum() / n_b)
    tolerance = 1e-9 * max(1.0, observed)  # a split as extreme as the observed, up to rounding
    first = pooled[_splits(n_a + n_b, n_a)].sum(axis=1)
    return float(np.mean(np.abs(first / n_a - (total - first) / n_b) >= observed - tolerance))


@functools.cache
def smallest_p(rates: bool, n_a: int, n_b: int) -> float:
    """The smallest p a pair's test can give at these seed counts, from the most extreme outcome
    they allow (every seed of one above every seed of the other): Fisher's exact test if
    `rates`, else the permutation test of the means. When it is not below the level a reading
    uses, no outcome of these seeds can separate the pair: it needs seeds, not another reading.
    Cached: the pairs of a table share their counts, and the permutation test enumerates every
    split."""
    if rates:
        return fisher_exact(n_a, n_a, 0, n_b)
    return permutation_p_value([1.0] * n_a, [0.0] * n_b)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values tested together (in their order): a family of
    comparisons keeps its 5% error rate when each adjusted p is read against 0.05."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
