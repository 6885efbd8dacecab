"""The statistics every study reports per point (linarena.analysis.statistics, issue #26): success
rates with 95% Wilson intervals, Fisher's exact test, the median and range of test accuracy."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from helpers.paths import load_script

from linarena.analysis.statistics import (
    STATISTICS_COLUMNS,
    fisher_exact,
    holm,
    permutation_p_value,
    point_statistics,
    wilson_interval,
)


@pytest.mark.parametrize(("successes", "n", "low", "high"), [
    (3, 3, 0.44, 1.00),    # 3 of 3 is compatible with a true rate of 0.44
    (10, 10, 0.72, 1.00),
    (5, 10, 0.24, 0.76),
    (0, 3, 0.00, 0.56),
])
def test_wilson_interval_matches_the_issues_values(successes, n, low, high) -> None:
    got = wilson_interval(successes, n)
    assert got == pytest.approx((low, high), abs=5e-3)


def test_wilson_interval_is_the_formula_and_stays_within_0_and_1() -> None:
    z = 1.96
    k, n = 2, 7
    centre = (k + z ** 2 / 2) / (n + z ** 2)
    half = z * math.sqrt(k * (n - k) / n + z ** 2 / 4) / (n + z ** 2)
    assert wilson_interval(k, n) == pytest.approx((centre - half, centre + half), rel=1e-12)
    for n in range(1, 12):
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0
    with pytest.raises(ValueError, match="4 of 3"):
        wilson_interval(4, 3)


# Two-sided p-values, summed by hand over the hypergeometric tables no more likely than the
# observed one: 3/3 vs 0/3: 2 * 1/C(6,3) = 0.1; 10/10 vs 5/10: C(10,5)C(10,10) and the mirror
# table C(10,10)C(10,5) over C(20,15) = 2 * 252 / 15504.
@pytest.mark.parametrize(("a", "n_a", "b", "n_b", "p"), [
    (3, 3, 0, 3, 0.1),
    (10, 10, 5, 10, 2 * 252 / 15504),
    (2, 3, 2, 3, 1.0),
    (0, 5, 0, 5, 1.0),
])
def test_fisher_exact_against_hand_computed_tables(a, n_a, b, n_b, p) -> None:
    assert fisher_exact(a, n_a, b, n_b) == pytest.approx(p, rel=1e-9)


def test_fisher_exact_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for a, n_a, b, n_b in [(3, 3, 0, 3), (7, 10, 2, 10), (1, 3, 9, 10), (4, 9, 5, 6),
                           (0, 10, 10, 10), (6, 12, 6, 12)]:
        table = [[a, n_a - a], [b, n_b - b]]
        expected = stats.fisher_exact(table, alternative="two-sided").pvalue
        assert fisher_exact(a, n_a, b, n_b) == pytest.approx(expected, rel=1e-9)


def test_point_statistics_count_a_diverged_seed_in_n_only() -> None:
    stats = point_statistics(pd.Series([0.95, 0.12, float("nan"), 0.90]))
    assert list(stats) == list(STATISTICS_COLUMNS)
    assert (stats["n_seeds"], stats["successes"], stats["success_rate"]) == (4, 2, 0.5)
    assert (stats["success_ci_low"], stats["success_ci_high"]) == wilson_interval(2, 4)
    assert (stats["median_acc"], stats["min_acc"], stats["max_acc"]) == (0.90, 0.12, 0.95)


def test_the_permutation_test_counts_the_splits_as_extreme_as_the_observed() -> None:
    # 3 against 3, fully separated: 2 of the C(6, 3) = 20 splits are as extreme (both ways).
    assert permutation_p_value([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert permutation_p_value([0.4, 0.4], [0.4, 0.4]) == 1.0  # ties at the observed: all
    # Rounding must not drop the observed split itself: 0.1 + 0.2 != 0.3 in floats.
    assert permutation_p_value([0.1, 0.2], [0.3, 0.0]) == 1.0
    with pytest.raises(ValueError, match="too many splits"):
        permutation_p_value([0.5] * 20, [0.5] * 20)


def test_holm_adjusts_in_step_down_order_and_keeps_the_input_order() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([0.9, 0.6]) == [1.0, 1.0]


def test_pairwise_tests_use_rates_for_recall_and_means_otherwise(tmp_path) -> None:
    runs = pd.DataFrame(
        [{"sweep": "s", "task": "mqar", "attention": a, "seed": s, "test_acc_pct": acc}
         for a, accs in (("softmax", [99.0] * 5), ("elu", [12.0] * 4 + [None]))
         for s, acc in enumerate(accs, 1)]
        + [{"sweep": "s", "task": "listops_small", "attention": a, "seed": s,
            "test_acc_pct": acc}
           for a, accs in (("softmax", [40.0, 41.0, 39.0]), ("elu", [38.0, 40.0, 39.0]))
           for s, acc in enumerate(accs, 1)])
    runs.to_csv(tmp_path / "results_runs.csv", index=False)
    script = load_script("scripts/maintainer/pairwise_tests.py")
    assert script.main(["--runs", str(tmp_path / "results_runs.csv"), "--out",
                        str(tmp_path)]) == 0
    pairs = pd.read_csv(tmp_path / "results_pairs.csv").set_index("task")
    mqar, listops = pairs.loc["mqar"], pairs.loc["listops_small"]
    assert (mqar["test"], mqar["n_b"], mqar["value_b"]) == ("fisher", 5, 0.0)  # failed: in n
    assert mqar["p"] == pytest.approx(fisher_exact(5, 5, 0, 5)) and bool(mqar["separated"])
    assert listops["test"] == "permutation" and not bool(listops["separated"])
    assert (listops["value_a"], listops["value_b"]) == pytest.approx((0.40, 0.39))  # fractions


@pytest.mark.parametrize("seeds, can_separate", [(5, False), (10, True)])
def test_pairwise_tests_say_when_the_seeds_cannot_separate_any_pair(
        tmp_path, capsys, seeds, can_separate) -> None:
    # 5 attentions whose seeds never overlap: 10 pairs. At 5 seeds the permutation test's
    # smallest p is 2/252 and Holm multiplies it by 10, past 0.05, so even these cannot be
    # separated and the script must say so; 10 seeds (smallest p 2/184,756) separate them all.
    runs = pd.DataFrame([{"sweep": "s", "task": "listops_small", "attention": f"a{i}",
                          "seed": s, "test_acc_pct": 30.0 + 2 * i + s / 100}
                         for i in range(5) for s in range(1, seeds + 1)])
    runs.to_csv(tmp_path / "results_runs.csv", index=False)
    script = load_script("scripts/maintainer/pairwise_tests.py")
    assert script.main(["--runs", str(tmp_path / "results_runs.csv"), "--out",
                        str(tmp_path)]) == 0
    pairs = pd.read_csv(tmp_path / "results_pairs.csv")
    floor = 2 / math.comb(2 * seeds, seeds)
    assert pairs["p_floor"].to_numpy() == pytest.approx([floor] * 10)
    assert pairs["p"].to_numpy() == pytest.approx([floor] * 10)  # the extreme outcome itself
    assert bool(pairs["separated"].all()) is can_separate
    assert ("no pair can be separated" in capsys.readouterr().out) is not can_separate
