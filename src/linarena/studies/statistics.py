"""The statistics of a study's point, written once: success rates with 95% Wilson intervals,
Fisher's exact test, and the median and range of the test accuracy over seeds.

A seed succeeds when its test accuracy reaches SUCCESS_THRESHOLD. A diverged seed (no accuracy,
NaN) counts among the n seeds, never among the successes, and is left out of the median, min
and max. With few seeds a rate says little: 3 of 3 is compatible with a true rate of 0.44
(Wilson, 95%), which is why every point table carries the interval beside the rate.
"""

from __future__ import annotations

import math

import pandas as pd

# A seed "recalls" when its test accuracy reaches this (the tables' "2/3").
SUCCESS_THRESHOLD = 0.9
# The normal quantile of a two-sided 95% interval.
Z_95 = 1.96
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
