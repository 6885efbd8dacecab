"""Golden runs: the presets behind published results still give the pinned losses.

A failure means the code no longer reproduces the results named in the message. Either rerun
them (the command given) or mark them stale, then pin the new losses with
`python scripts/golden_runs.py`. A refactor that changes no number passes.
"""

from __future__ import annotations

import json
import logging
import math

import pytest

from linarena.analysis.golden import BATCH, GOLDEN_FILE, SEED, STEPS, GoldenCase, run_case

PINNED = json.loads(GOLDEN_FILE.read_text())
CASES = PINNED["cases"]


def test_pinned_file_matches_the_golden_settings():
    assert (PINNED["steps"], PINNED["batch"], PINNED["seed"]) == (STEPS, BATCH, SEED), (
        "golden settings changed: pin the losses again with python scripts/golden_runs.py")


@pytest.mark.parametrize("key", sorted(CASES))
def test_golden(key: str) -> None:
    entry = CASES[key]
    case = GoldenCase(entry["preset"], entry["attention"], tuple(entry["overrides"]),
                      tuple(entry["results"]), entry["rerun"])
    logging.disable(logging.WARNING)
    try:
        values = run_case(case)
    finally:
        logging.disable(logging.NOTSET)
    tolerance = PINNED["relative_tolerance"]
    moved = [(index, old, new) for index, (old, new) in enumerate(zip(entry["values"], values,
                                                                    strict=True))
             if not math.isclose(old, new, rel_tol=tolerance)]
    if moved:
        index, old, new = moved[0]
        quantity = "loss" if index <= STEPS else "parameter norm"
        what = f"{quantity} at step {index % (STEPS + 1)}"
        files = " ".join(entry["results"])
        pytest.fail(
            f"golden run {key} changed: {what} {new:.7f}, pinned {old:.7f} "
            f"(relative tolerance {tolerance}). The code no longer gives the numbers of "
            f"docs/results/ {files}. Rerun them: {entry['rerun']}; or mark them stale: "
            f"python scripts/provenance.py --stale {files} --reason '<what changed>'. "
            "Then pin the new losses: python scripts/golden_runs.py", pytrace=False)
