"""The card's comparisons are the study scripts' own numbers: the card of a published attention
(elu+1), given its published runs, reproduces the published statistics of its rows: the
permutation p-values of scripts/maintainer/pairwise_tests.py (results_pairs.csv), and the
state-size points and Fisher p-values of the study (mqar_state_size.csv,
mqar_state_size_pairs.csv), and the mixture's Fisher p-values per positions and test setting
(mqar_mixture_pairs.csv)."""

from __future__ import annotations

import pandas as pd
import pytest

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.arena.comparisons import (
    listops_comparison,
    mixture_comparison,
    published_listops,
    published_mixture,
    published_state_size,
    state_size_comparison,
)
from linarena.arena.sections import listops_section, mixture_section
from linarena.arena.subject import parse_subject
from linarena.arena.training import state_size_grid
from linarena.studies.state_size_report import summarize


def test_listops_p_values_are_the_published_pairs() -> None:
    published = published_listops()
    elu = list(published[published["attention"] == "elu"]["test_acc_pct"] / 100)
    table = listops_comparison("elu", elu, published).set_index("attention")
    pairs = pd.read_csv(PUBLISHED_DIR / "results_pairs.csv")
    pairs = pairs[(pairs["task"] == "listops_small")
                  & ((pairs["a"] == "elu") | (pairs["b"] == "elu"))]
    assert len(pairs) == len(table) == published["attention"].nunique() - 1
    for pair in pairs.itertuples():
        other = pair.b if pair.a == "elu" else pair.a
        assert table.loc[other, "p"] == pytest.approx(pair.p, rel=1e-9), other
        assert table.loc[other, "p_floor"] == pytest.approx(pair.p_floor, rel=1e-9)
    assert "AMD EPYC" in table["machines"].iloc[0] and "commit 272ec9e" in table["machines"].iloc[0]


@pytest.mark.parametrize(("width", "conv"), [(16, 3), (32, 0), (64, 3)])
def test_state_size_points_and_fisher_p_values_are_the_published_ones(width: int,
                                                                      conv: int) -> None:
    points, runs = published_state_size()
    subject = parse_subject(["attention=elu"])
    grid = state_size_grid(subject, [16, 32, 64])
    ours = summarize(runs[runs["attention"] == "elu"], grid)
    point = ours[(ours["d_model"] == width) & (ours["short_conv"] == conv)].iloc[0]
    row = points[(points["attention"] == "elu") & (points["d_model"] == width)
                 & (points["short_conv"] == conv)].iloc[0]
    for column in ("chosen_lr", "successes", "n_seeds", "median_acc", "state_size"):
        assert point[column] == pytest.approx(row[column]), column
    table = state_size_comparison(point, points, runs).set_index("attention")
    pairs = pd.read_csv(PUBLISHED_DIR / "mqar_state_size_pairs.csv")
    pairs = pairs[(pairs["varied"] == "attention")
                  & (pairs["fixed"] == f"d_model={width}, short_conv={conv}")
                  & ((pairs["a"] == "elu") | (pairs["b"] == "elu"))]
    assert len(pairs) == len(table) > 10
    for pair in pairs.itertuples():
        other = pair.b if pair.a == "elu" else pair.a
        assert table.loc[other, "p"] == pytest.approx(pair.fisher_p, rel=1e-9), other


def test_mixture_fisher_p_values_are_the_published_pairs() -> None:
    published = published_mixture()
    table = mixture_comparison(published[published["attention"] == "elu"], published)
    pairs = pd.read_csv(PUBLISHED_DIR / "mqar_mixture_pairs.csv")
    pairs = pairs[(pairs["varied"] == "attention")
                  & ((pairs["a"] == "elu") | (pairs["b"] == "elu"))]
    assert len(pairs) == len(table) > 100
    for pair in pairs.itertuples():
        other = pair.b if pair.a == "elu" else pair.a
        positions, setting = (part.split("=")[1] for part in pair.fixed.split(", "))
        row = table[(table["attention"] == other) & (table["positions"] == positions)
                    & ("L" + table["length"].astype(str) + " P" + table["pairs"].astype(str)
                       == setting)]
        assert len(row) == 1, (other, pair.fixed)
        assert row["p"].iloc[0] == pytest.approx(pair.fisher_p, rel=1e-9), (other, pair.fixed)
        assert row["p_floor"].iloc[0] == pytest.approx(pair.fisher_p_floor, rel=1e-9)


def test_the_mixture_section_reads_beyond_the_training_lengths_against_the_field() -> None:
    published = published_mixture()
    softmax = published[published["attention"] == "softmax"]
    body, line = mixture_section(softmax, mixture_comparison(softmax, published))
    # softmax with RoPE recalls at L128 in 6 of 10 seeds; GLA in none of 10 (published)
    assert "### Beyond the training lengths, positions rope: this variant L128 P32 † 6/10" \
        in body
    assert "| GLA | 0/10, Holm p" in body
    assert line.startswith("Mixture beyond the training lengths: positions none (n = 5): "
                           "5/5, 5/5 seeds recall at L128 P32 †, L256 P64 †; after Holm")
    assert "positions rope (n = 10): 6/10, 0/10 seeds recall" in line


def test_the_listops_section_says_how_much_of_its_threads_a_run_had() -> None:
    published = published_listops()
    elu = published[published["attention"] == "elu"]
    runs = pd.DataFrame({"test_acc": elu["test_acc_pct"] / 100, "tokens_per_sec": 1000.0,
                         "duration_s": 100.0, "cpu_s": 100.0, "commit": "abc", "cpu": "X",
                         "cpu_kernels": "Y"})
    comparison = listops_comparison("elu", list(runs["test_acc"]), published)
    body, line = listops_section(runs, comparison, None, threads=2)
    assert "its runs had a median 50% of their 2 threads' time" in body
    assert line.startswith(f"ListOps: mean {100 * runs['test_acc'].mean():.2f}% over 10 seeds")
