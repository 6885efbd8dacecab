"""The pairs of study points a reading may compare (issue #26 item 4): points differing in one
coordinate, Fisher's exact p, Holm within a family, and the published pair tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script

from linarena.analysis.provenance import load, mark_stale, record
from linarena.analysis.statistics import (
    fisher_exact,
    permutation_p_value,
    smallest_p,
    wilson_interval,
)
from linarena.studies.point_pairs import one_coordinate_pairs, pair_test


def point(attention: str, d_model: int, conv: int, k: int, n: int) -> dict:
    low, high = wilson_interval(k, n)
    return {"attention": attention, "d_model": d_model, "short_conv": conv, "n_seeds": n,
            "successes": k, "success_ci_low": low, "success_ci_high": high,
            "median_acc": 0.95 if 2 * k > n else 0.5}


POINTS = pd.DataFrame([point("elu", 16, 3, 0, 5), point("gla", 16, 3, 5, 5),
                       point("retnet", 16, 3, 1, 5), point("elu", 32, 3, 5, 5),
                       point("elu", 16, 0, 0, 5)])
COORDINATES = ("attention", "d_model", "short_conv")


def test_only_points_that_differ_in_one_coordinate_are_paired() -> None:
    pairs = one_coordinate_pairs(POINTS, COORDINATES)
    found = {(row.varied, row.fixed, row.a, row.b) for row in pairs.itertuples()}
    assert found == {
        ("attention", "d_model=16, short_conv=3", "elu", "gla"),
        ("attention", "d_model=16, short_conv=3", "elu", "retnet"),
        ("attention", "d_model=16, short_conv=3", "gla", "retnet"),
        ("d_model", "attention=elu, short_conv=3", "16", "32"),
        ("short_conv", "attention=elu, d_model=16", "3", "0"),
    }  # gla at 16 and elu at 32 differ in two coordinates: never a pair


def test_fisher_p_the_intervals_and_holm_within_the_family() -> None:
    pairs = one_coordinate_pairs(POINTS, COORDINATES).set_index(["a", "b"])
    # 0/5 against 5/5: only the observed table and its mirror are as extreme, 2 of C(10, 5).
    assert pairs.loc[("elu", "gla"), "fisher_p"] == pytest.approx(2 / 252, rel=1e-12)
    assert pairs.loc[("elu", "gla"), "separated"]
    assert not pairs.loc[("elu", "gla"), "intervals_overlap"]
    # 0/5 against 1/5: one seed apart, the same rate as far as 5 seeds can tell.
    assert pairs.loc[("elu", "retnet"), "fisher_p"] == pytest.approx(1.0)
    assert pairs.loc[("elu", "retnet"), "intervals_overlap"]
    # The three attentions at (16, 3) are one family: Holm multiplies the smallest p by 3.
    assert pairs.loc[("elu", "gla"), "p_holm"] == pytest.approx(3 * 2 / 252, rel=1e-12)
    # A family of one pair is not adjusted.
    assert pairs.loc[("16", "32"), "p_holm"] == pairs.loc[("16", "32"), "fisher_p"]


def test_each_p_has_the_floor_its_seed_counts_allow(tmp_path: Path, capsys) -> None:
    """3/3 against 0/3 is as far apart as 3 seeds go, yet Fisher's p is 0.1: the pair needs
    seeds, and the table and the script's summary say so instead of a bare "not separated"."""
    points = pd.DataFrame([point("elu", 16, 3, 0, 3), point("gla", 16, 3, 3, 3),
                           point("retnet", 16, 3, 5, 5), point("elu", 32, 3, 0, 5)])
    pairs = one_coordinate_pairs(points, COORDINATES).set_index(["a", "b"])
    assert pairs.loc[("elu", "gla"), "fisher_p"] == pytest.approx(0.1, rel=1e-12)
    assert pairs.loc[("elu", "gla"), "fisher_p_floor"] == pytest.approx(0.1, rel=1e-12)
    assert not pairs.loc[("elu", "gla"), "separated"]
    assert pairs.loc[("16", "32"), "fisher_p_floor"] == pytest.approx(1 / 56, rel=1e-12)  # 3, 5
    points.to_csv(tmp_path / "mqar_state_size.csv", index=False)
    assert load_script("scripts/maintainer/study_pairs.py").main(["--folder", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # Of the attention family's floors, elu-gla's 0.1 closes that pair alone; elu-retnet's (3
    # against 5) is 1/C(8, 3) = 0.018, yet Holm's 3 x 0.018 = 0.054 closes the whole family.
    assert "1 of 3 pairs cannot be separated at their seed counts" in out
    assert "1 of 1 families cannot separate any pair after Holm" in out
    assert "d_model varied" in out and out.count("cannot") == 2  # elu 16-32: floor 0.018


def test_accuracies_that_fall_by_degrees_are_compared_where_no_seed_reaches_90() -> None:
    """Beyond the training length nothing reaches 90%, so Fisher cannot tell 0/5 at 80% from
    0/5 at 10%; the permutation test of the mean accuracy can: 5 seeds entirely above 5 others
    is 2 of C(10, 5) splits as extreme. A diverged seed (NaN) is left out of it."""
    points = pd.DataFrame([point("elu", 16, 3, 0, 5), point("elu", 32, 3, 0, 5)])
    accuracies = {("elu", 16, 3): [0.81, 0.84, 0.85, 0.80, 0.83],
                  ("elu", 32, 3): [0.10, 0.08, 0.12, 0.09, float("nan"), 0.11]}
    row, = one_coordinate_pairs(points, COORDINATES, accuracies).itertuples()
    assert row.fisher_p == 1.0 and not row.separated
    assert row.acc_p == pytest.approx(2 / 252, rel=1e-12)  # 5 against the 5 with an accuracy
    assert row.acc_p_floor == pytest.approx(2 / 252, rel=1e-12)
    assert (row.median_acc_a, row.median_acc_b) == (0.5, 0.5)  # the point tables' medians
    assert one_coordinate_pairs(points, COORDINATES)[["acc_p", "acc_p_floor"]].isna().all(
        axis=None)  # none given


def test_a_table_that_is_not_a_point_table_is_refused_with_the_column_it_lacks() -> None:
    with pytest.raises(ValueError, match="no column 'successes'"):
        one_coordinate_pairs(POINTS.drop(columns="successes"), COORDINATES)


def test_the_script_writes_a_pair_table_per_study_with_its_provenance(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    POINTS.to_csv(folder / "mqar_state_size.csv", index=False)
    mixture = pd.DataFrame([point("softmax", 0, 0, 5, 5) | {"positions": p, "length": 256,
                                                            "pairs": 64}
                            for p in ("none", "rope")])
    mixture.loc[1, ["successes", "success_ci_low", "success_ci_high"]] = [0, *wilson_interval(0, 5)]
    mixture.drop(columns=["d_model", "short_conv"]).to_csv(folder / "mqar_mixture.csv",
                                                           index=False)
    script = load_script("scripts/maintainer/study_pairs.py")
    assert script.main(["--folder", str(folder)]) == 2  # the mixture's runs CSV is needed
    pd.DataFrame({"attention": "softmax", "positions": ["none"] * 5 + ["rope"] * 5,
                  "length": 256, "pairs": 64, "seed": [*range(1, 6)] * 2,
                  "acc": [0.97] * 5 + [0.40, 0.45, 0.50, 0.55, 0.60]}).to_csv(
        folder / "mqar_mixture_runs.csv", index=False)
    script = load_script("scripts/maintainer/study_pairs.py")
    assert script.main(["--folder", str(folder)]) == 0
    assert len(pd.read_csv(folder / "mqar_state_size_pairs.csv")) == 5
    row = pd.read_csv(folder / "mqar_mixture_pairs.csv").iloc[0]
    assert (row["varied"], row["fixed"], row["a"], row["b"]) == (
        "positions", "attention=softmax, setting=L256 P64", "none", "rope")
    assert row["fisher_p"] == pytest.approx(2 / 252)
    assert row["acc_p"] == pytest.approx(2 / 252)
    records = load(folder)
    assert {"mqar_state_size_pairs.csv", "mqar_mixture_pairs.csv"} <= set(records)


def test_a_table_marked_stale_is_not_tested(tmp_path: Path, capsys) -> None:
    """A stale table holds the previous code's rates: no pair table (and so no reading) is
    made from it until it is rerun."""
    POINTS.to_csv(tmp_path / "mqar_state_size.csv", index=False)
    record([tmp_path / "mqar_state_size.csv"], "python scripts/mqar_study.py")
    mark_stale("mqar_state_size.csv", "trained on older kernels", tmp_path)
    script = load_script("scripts/maintainer/study_pairs.py")
    assert script.main(["--folder", str(tmp_path)]) == 0
    assert not (tmp_path / "mqar_state_size_pairs.csv").exists()
    assert "mqar_state_size.csv: marked stale at" in capsys.readouterr().out


def test_the_script_says_which_tables_it_looked_for(tmp_path: Path, capsys) -> None:
    script = load_script("scripts/maintainer/study_pairs.py")
    assert script.main(["--folder", str(tmp_path)]) == 2
    assert "no study point table (mqar_state_size.csv, mqar_mixture.csv)" in \
        capsys.readouterr().err


def test_a_pair_of_seed_lists_gets_fisher_on_rates_or_permutation_on_means() -> None:
    """pair_test, the sweeps' and the self-pretraining study's test: a failed run (NaN) is a
    seed below the threshold in a rate and is left out of a mean."""
    a, b = pd.Series([0.95, 0.2, 0.99, 0.91]), pd.Series([0.1, float("nan"), 0.92])
    assert pair_test(a, b, rates=True) == {
        "test": "fisher", "value_a": 0.75, "value_b": 1 / 3, "p": fisher_exact(3, 4, 1, 3),
        "p_floor": smallest_p(True, 4, 3)}
    assert pair_test(a, b, rates=True, threshold=0.05)["value_b"] == 2 / 3
    means = pair_test(a, b, rates=False)
    assert (means["test"], means["p_floor"]) == ("permutation", smallest_p(False, 4, 2))
    assert (means["value_a"], means["value_b"]) == pytest.approx((0.7625, 0.51))
    assert means["p"] == permutation_p_value([0.95, 0.2, 0.99, 0.91], [0.1, 0.92])
