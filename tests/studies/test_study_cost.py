"""The study-cost benchmark: its cases are the study's own runs, and its table pairs each case's
runs before and after a change."""

from __future__ import annotations

import pandas as pd
import pytest

from linarena.studies.study_cost import CostCase, cost_cases, median_summary, ratios

CHOSEN = pd.DataFrame({"attention": ["softmax", "softmax", "mamba2_layer", "gated_deltanet+swa"],
                       "short_conv": [3, 0, 0, 3], "d_model": [16, 16, 16, 16],
                       "chosen_lr": [0.01, 0.001, 0.00316, 0.001]})


def test_a_case_is_the_study_run_at_its_chosen_lr_and_short_conv() -> None:
    cases = cost_cases("mqar_study_cpu", ["softmax", "mamba2_layer", "gated_deltanet+swa"],
                       [16], CHOSEN)
    # A plain variant trains with the study's conv of 3 taps; a layer with its own convolutions
    # only without one.
    assert cases == [CostCase("softmax", 16, 3, 0.01, 1),
                     CostCase("mamba2_layer", 16, 0, 0.00316, 1),
                     CostCase("gated_deltanet+swa", 16, 3, 0.001, 1)]
    assert cases[0].settings == ["model.d_model=16", "model.short_conv=3", "optim.lr=0.01",
                                 "seed=1"]


def test_a_case_the_study_summary_does_not_hold_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no chosen lr for gla at d_model 16"):
        cost_cases("mqar_study_cpu", ["gla"], [16], CHOSEN)


def test_the_table_pairs_before_and_after_and_flags_a_changed_result() -> None:
    rows = pd.DataFrame([
        {"entry": "softmax", "d_model": 16, "short_conv": 3, "lr": 0.01, "seed": 1,
         "code": code, "steps": 400, "test_acc": 0.99, "cpu_s": cpu, "process_cpu_s": cpu + 6}
        for code, cpu in (("before", 4.0), ("after", 2.0))] + [
        {"entry": "gla", "d_model": 16, "short_conv": 3, "lr": 0.01, "seed": 1, "code": code,
         "steps": 600, "test_acc": acc, "cpu_s": 10.0, "process_cpu_s": 16.0}
        for code, acc in (("before", 0.99), ("after", 0.98))])
    table = ratios(rows).set_index("entry")
    assert table.loc["softmax", "cpu_s_ratio"] == 0.5
    assert table.loc["softmax", "process_cpu_s_ratio"] == 0.8
    assert table.loc["softmax", "same_result"] and not table.loc["gla", "same_result"]
    assert median_summary(table)["median_cpu_s_ratio"] == 0.75
