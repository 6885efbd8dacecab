"""The README's predictions checked against the study tables (linarena.studies.predictions,
scripts/maintainer/check_predictions.py): a comparison is a verdict only where Fisher's test or
the Wilson interval separates the rates, and an unfinished study gives "missing", not a verdict."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script

from linarena.analysis.provenance import mark_stale, record
from linarena.studies.predictions import (
    LAYER_CORES,
    Point,
    check,
    mixture_checks,
    state_size_checks,
)


def verdict(name: str, a: tuple[int, int], b: tuple[int, int] | None = None) -> str:
    return check(0, name, Point("a", "", *a), Point("b", "", *b) if b else None)["verdict"]


@pytest.mark.parametrize(("name", "a", "b", "expected"), [
    ("at_least", (2, 10), (9, 10), "contradicted"),   # Fisher p = 0.005
    ("at_least", (4, 5), (5, 5), "held"),             # lower, but not separated at n = 5
    ("at_least", (5, 5), (0, 5), "held"),
    ("higher", (10, 10), (0, 10), "held"),
    ("higher", (3, 5), (2, 5), "not separated"),
    ("higher", (5, 5), (5, 5), "not separated"),
    ("higher", (0, 10), (10, 10), "contradicted"),
    ("recalls", (5, 5), None, "held"),                # Wilson (0.57, 1)
    ("recalls", (8, 10), None, "not separated"),      # Wilson (0.49, 0.94)
    ("recalls", (0, 5), None, "contradicted"),
    ("never", (0, 5), None, "held"),
    ("never", (1, 10), None, "contradicted"),
])
def test_verdicts_follow_the_tests_not_the_rates_alone(name, a, b, expected) -> None:
    assert verdict(name, a, b) == expected


def test_a_point_not_in_the_table_is_missing_not_a_verdict() -> None:
    row = check(1, "at_least", Point("gla_layer", "d16", None, None), Point("gla", "d16", 5, 5))
    assert row["verdict"] == "missing" and row["fisher_p"] is None


def point_rows(names: list[str], widths: list[int], convs: list[int], k: int, n: int) -> list:
    return [{"attention": a, "short_conv": c, "d_model": w, "successes": k, "n_seeds": n}
            for a in names for w in widths for c in convs]


def test_the_state_size_checks_cover_every_grid_point_each_prediction_names() -> None:
    hybrids = ["swa", "gated_deltanet+softmax", "gated_deltanet+swa"]
    table = pd.DataFrame(
        point_rows([*LAYER_CORES, *hybrids], [16, 32], [0], 5, 5)
        + point_rows([*LAYER_CORES.values(), "softmax", *hybrids], [16, 32], [3], 0, 5)
        + point_rows(["softmax"], [16, 32], [0], 5, 5))
    rows = pd.DataFrame(state_size_checks(table, [16, 32], [0, 3]))
    assert rows.groupby("prediction").size().to_dict() == {1: 12, 2: 6, 3: 2, 4: 4, 5: 6}
    # Every layer 5/5 with its own conv against its core 0/5 with the conv: prediction 1 held.
    assert set(rows.loc[rows["prediction"] == 1, "verdict"]) == {"held"}
    # The window recalled (5/5) at short conv 0: prediction 4 contradicted there.
    swa = rows[rows["prediction"] == 4].set_index("a_point")["verdict"]
    assert swa["d_model 16, short conv 0"] == "contradicted"
    assert swa["d_model 16, short conv 3"] == "held"
    # Softmax recalls only without the conv: the hybrid is checked only there.
    hybrid = rows[(rows["prediction"] == 5) & (rows["check"] == "recalls")]
    assert set(hybrid["a_point"]) == {"d_model 16, short conv 0", "d_model 32, short conv 0"}
    # gated_deltanet (the core) trained at conv 3 only here: at conv 0 it is missing.
    missing = rows[(rows["prediction"] == 5) & (rows["check"] == "at_least")]
    assert (missing["verdict"] == "missing").sum() == 2


def test_the_mixture_checks_compare_positions_at_twice_and_four_times_the_training_length(
) -> None:
    rows = []
    for name, at_128 in (("softmax", {"none": 5, "rope": 0}), ("gla", {"none": 2, "rope": 1}),
                         ("elu", {"none": 0, "rope": 0})):
        for positions in ("none", "rope"):
            for length, pairs, k in ((64, 8, 5), (128, 32, at_128[positions]), (256, 64, 0)):
                rows.append({"attention": name, "positions": positions, "length": length,
                             "pairs": pairs, "beyond_train": length > 64, "successes": k,
                             "n_seeds": 5})
    checks = pd.DataFrame(mixture_checks(pd.DataFrame(rows)))
    twice = checks[checks["check"] == "higher"].set_index("a")["verdict"].to_dict()
    assert twice == {"softmax": "held", "gla": "not separated"}  # feature maps: not claimed
    four = checks[checks["check"] == "never"]
    assert sorted(four["a"]) == ["elu", "elu", "gla", "gla"]  # linear attentions, both kinds
    assert set(four["verdict"]) == {"held"} and set(four["a_point"].str[-10:]) == {"(64 pairs)"}


def test_a_table_of_an_older_script_is_a_clear_error(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    old = tmp_path / "mqar_mixture.csv"
    old.write_text("attention,label,length,pairs,beyond_train,seeds,recalled\n"
                   "softmax,softmax,32,4,False,3,3\n")
    script = load_script("scripts/maintainer/check_predictions.py")
    assert script.main(["--state-size", str(tmp_path / "absent.csv"), "--mixture", str(old),
                        "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "no column ['n_seeds', 'successes', 'positions']" in error
    assert "scripts/mqar_mixture.py --report-only" in error


def test_a_table_marked_stale_gives_no_verdicts(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    """The previous protocol's table (here in an older script's columns, as published before the
    rerun) is skipped, not read as evidence for or against a prediction."""
    old = tmp_path / "mqar_mixture.csv"
    old.write_text("attention,label,length,pairs,beyond_train,seeds,recalled\n"
                   "softmax,softmax,32,4,False,3,3\n")
    record([old], "python scripts/mqar_mixture.py")
    mark_stale(old.name, "the 3-seed protocol", tmp_path)
    script = load_script("scripts/maintainer/check_predictions.py")
    assert script.main(["--state-size", str(tmp_path / "absent.csv"), "--mixture", str(old),
                        "--out", str(tmp_path)]) == 0
    assert "marked stale at" in capsys.readouterr().out
    assert pd.read_csv(tmp_path / "predictions.csv").empty
