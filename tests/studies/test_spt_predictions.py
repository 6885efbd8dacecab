"""The self-pretraining predictions' clauses read from the report's tables
(linarena.studies.spt_predictions): each verdict follows its stated rule at the boundary, names
the attentions behind it, and nothing is read while the study is partial."""

from __future__ import annotations

import pandas as pd

from linarena.attention.variants import variant_names
from linarena.studies.spt import SCRATCH, SCRATCH_TOTAL, SPT, load_protocol
from linarena.studies.spt_predictions import NOT_READ, verdict_lines, verdicts
from linarena.studies.spt_statistics import COMPARISONS

ATTENTIONS = variant_names()
MOST = len(ATTENTIONS) // 2 + 1  # the fewest that are more than half
FEW = len(ATTENTIONS) // 4  # the most that are at most a quarter


def comparison_rows(comparison: tuple[str, str, str], test: str, above: int, below: int
                    ) -> list[dict]:
    """One pair per attention: the first `above` separated with a positive difference, the
    next `below` with a negative one, the rest not separated."""
    a, b, equal = comparison
    rows = []
    for i, name in enumerate(ATTENTIONS):
        difference = 0.02 if i < above else -0.02 if i < above + below else 0.001
        rows.append({"comparison": f"{a} vs {b}: {equal}", "attention_a": name, "arm_a": a,
                     "attention_b": name, "arm_b": b, "test": test, "difference": difference,
                     "separated": i < above + below})
    return rows


def spread(low: float, high: float, spt_pairs: int, scratch_pairs: int) -> pd.DataFrame:
    return pd.DataFrame([
        {"arm": SCRATCH, "std": 0.015, "std_ci_low": 0.014, "std_ci_high": 0.017, "pairs": 171,
         "pairs_separated": scratch_pairs},
        {"arm": SPT, "std": 0.01, "std_ci_low": 0.009, "std_ci_high": 0.011, "pairs": 171,
         "pairs_separated": spt_pairs},
        {"arm": f"{SPT} - {SCRATCH}", "std": (low + high) / 2, "std_ci_low": low,
         "std_ci_high": high, "pairs": 171, "pairs_separated": spt_pairs - scratch_pairs}])


def listops(above: int, below: int, total_separated: int, low: float, high: float,
            partial: bool = False, spt_pairs: int = 3) -> dict[str, str]:
    pairs = pd.DataFrame(comparison_rows(COMPARISONS[0], "permutation", above, below)
                         + comparison_rows(COMPARISONS[1], "permutation", 0, total_separated))
    table = verdicts(pd.DataFrame(), pairs, spread(low, high, spt_pairs, 26),
                     load_protocol("spt/listops_small"), partial)
    return dict(zip(table["clause"], table["verdict"], strict=True))


def test_listops_clauses_follow_their_rules_at_the_boundaries() -> None:
    # Most is more than half of the attentions, few at most a quarter.
    assert listops(MOST, 0, FEW, -0.005, -0.001) == {
        "spread": "held", "pairs": "held", "raises": "held", "matched": "held"}
    assert listops(MOST - 1, 0, FEW + 1, -0.005, 0.001) == {
        "spread": "not separated", "pairs": "held", "raises": "not separated",
        "matched": "contradicted"}
    assert listops(0, MOST, 0, 0.001, 0.004)["raises"] == "contradicted"
    assert listops(0, MOST, 0, 0.001, 0.004)["spread"] == "contradicted"
    assert listops(0, 0, 0, -0.005, -0.001, spt_pairs=26)["pairs"] == "contradicted"


def test_nothing_is_read_while_the_study_is_partial() -> None:
    assert set(listops(MOST, 0, 0, -0.005, -0.001, partial=True).values()) == {NOT_READ}
    pairs = pd.DataFrame(comparison_rows(COMPARISONS[0], "permutation", 0, 0)
                         + comparison_rows(COMPARISONS[1], "permutation", 0, 0))
    table = verdicts(pd.DataFrame(), pairs, spread(-0.005, -0.001, 3, 26),
                     load_protocol("spt/listops_small"), partial=True)
    assert "not read yet" in verdict_lines(table, "spt_listops")


def test_pathfinder_names_the_attentions_that_learn() -> None:
    protocol = load_protocol("spt/pathfinder_small")
    summary = pd.DataFrame([
        {"arm": arm, "attention": name, "n": 5,
         "successes": 1 if (arm, name) == (SCRATCH_TOTAL, "softmax") else 0}
        for arm in (SCRATCH, SPT, SCRATCH_TOTAL) for name in ("softmax", "elu")])
    pairs = pd.DataFrame([
        {"comparison": "spt vs scratch: equal fine-tuning steps", "attention_a": name,
         "test": "fisher", "difference": 0.8 if name == "elu" else 0.0,
         "separated": name == "elu"} for name in ("softmax", "elu")])
    table = verdicts(summary, pairs, pd.DataFrame(), protocol, partial=False)
    rows = table.set_index("clause")
    assert rows.loc["chance from scratch", "verdict"] == "contradicted"
    assert "1 of 20 seeds at 60%" in rows.loc["chance from scratch", "found"]
    assert "softmax" in rows.loc["chance from scratch", "found"]
    assert rows.loc["SPT lifts few", "verdict"] == "contradicted"
    assert "SPT above for elu+1" in rows.loc["SPT lifts few", "found"]
    text = verdict_lines(table, "spt_pathfinder")
    assert text.startswith("**The prediction, clause by clause** (spt_pathfinder_verdicts.csv)")
