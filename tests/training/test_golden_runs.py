"""Golden runs: the presets behind published results still give the pinned losses.

A failure means the code no longer reproduces the results named in the message. Either rerun
them (the command given) or mark them stale, then pin the new losses with
`python scripts/maintainer/golden_runs.py`. A refactor that changes no number passes.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script

from linarena.reports import golden
from linarena.reports.golden import (
    BATCH,
    GOLDEN_FILE,
    SEED,
    STEPS,
    GoldenCase,
    case_key,
    cases,
    published,
    published_cases,
    run_case,
)

PINNED = json.loads(GOLDEN_FILE.read_text())
CASES = PINNED["cases"]


@contextmanager
def logging_restored(silenced: bool = True) -> Iterator[None]:
    """Run a golden case (or golden_runs.main, which silences logging process-wide) and turn
    logging back on after it, so later tests on the same xdist worker still see their lines
    (the Optuna test reads INFO lines)."""
    if silenced:
        logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def test_pinned_file_matches_the_golden_settings():
    assert (PINNED["steps"], PINNED["batch"], PINNED["seed"]) == (STEPS, BATCH, SEED), (
        "golden settings changed: pin the losses again with "
        "python scripts/maintainer/golden_runs.py")


@pytest.mark.parametrize("key", sorted(CASES))
def test_golden(key: str) -> None:
    entry = CASES[key]
    case = GoldenCase(entry["preset"], entry["attention"], tuple(entry["overrides"]),
                      tuple(entry["results"]), entry["rerun"])
    with logging_restored():
        values = run_case(case)
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
            f"python scripts/maintainer/provenance.py --stale {files} --reason '<what changed>'. "
            "Then pin the new losses: python scripts/maintainer/golden_runs.py", pytrace=False)


def test_mixture_golden_run_is_deterministic_and_fast() -> None:
    # The mixture preset has no data.num_train: its golden size is set per (length, pairs).
    none, case = cases([], [], [], ["elu"])
    assert none.overrides == ("model.positions=none",)
    assert case.overrides == ("model.positions=rope",)
    assert case.preset == "mqar_mixture_cpu" and "mqar_mixture.csv" in case.results
    with logging_restored():
        timings, values = [], []
        for _ in range(2):
            golden._batches.cache_clear()  # regenerate the data too
            started = time.monotonic()
            values.append(run_case(case))
            timings.append(time.monotonic() - started)
    assert values[0] == values[1]
    assert len(values[0]) == 2 * (STEPS + 1) and all(math.isfinite(v) for v in values[0])
    # Every golden case runs in the default suite: each must stay a few seconds.
    assert max(timings) < 15, f"mixture golden run took {max(timings):.1f} s"


def test_a_studys_golden_cases_are_configured_as_the_study_trains_them() -> None:
    """A layer with its own convolutions only without model.short_conv, the window and the
    hybrids with their study entry's overrides, the mixture at each kind of positions: a case
    configured otherwise would pin numbers no published run came from (or fail to compose)."""
    found = {case_key(case): case for case in cases([], [], ["based_layer", "swa",
                                                               "gated_deltanet+swa"],
                                                       ["deltanet_layer"])}
    assert sorted(found) == [
        "mqar_mixture_cpu/deltanet_layer/model.positions=none/model.short_conv=0",
        "mqar_mixture_cpu/deltanet_layer/model.positions=rope/model.short_conv=0",
        "mqar_study_cpu/based_layer/attention.window=16/model.short_conv=0",
        "mqar_study_cpu/gated_deltanet+swa/model.pattern=[gated_deltanet,{swa:{window:16}}]"
        "/model.short_conv=0",
        "mqar_study_cpu/gated_deltanet+swa/model.pattern=[gated_deltanet,{swa:{window:16}}]"
        "/model.short_conv=3",
        "mqar_study_cpu/swa/attention.window=16/model.short_conv=0",
        "mqar_study_cpu/swa/attention.window=16/model.short_conv=3"]
    hybrid = found["mqar_study_cpu/gated_deltanet+swa/model.pattern=[gated_deltanet,"
                   "{swa:{window:16}}]/model.short_conv=3"]
    assert not any(o.startswith("attention=") for o in hybrid.train_overrides)
    assert found["mqar_study_cpu/swa/attention.window=16/model.short_conv=3"].train_overrides[0] \
        == "attention=swa"
    with logging_restored():
        values = run_case(hybrid)  # composes and trains as train.py would
    assert len(values) == 2 * (STEPS + 1) and all(math.isfinite(v) for v in values)


def test_every_published_attention_has_its_golden_runs_pinned() -> None:
    """A result rerun with more attentions (a new variant in a benchmark or study) must pin
    their golden runs too, or a later change to those variants would go unnoticed."""
    missing = [case_key(case) for case in published_cases() if case_key(case) not in CASES]
    assert not missing, (f"{len(missing)} published golden cases are not pinned, e.g. "
                         f"{missing[:3]}: python scripts/maintainer/golden_runs.py")


def test_a_result_not_run_yet_has_no_golden_cases(tmp_path: Path) -> None:
    assert published("mqar_mixture.csv", tmp_path) == []
    pd.DataFrame({"attention": ["elu", "softmax", "elu"]}).to_csv(tmp_path / "results.csv")
    assert published("results.csv", tmp_path) == ["elu", "softmax"]
    assert {case.preset for case in published_cases(tmp_path)} == {"", "mqar_cpu"}


def test_missing_only_pins_the_unpinned_cases_and_keeps_every_pinned_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding cases on another CPU must not re-pin the others: their values came from the
    machine the published results were checked on."""
    script = load_script("scripts/maintainer/golden_runs.py")
    kept, added = GoldenCase("", "elu", (), ("results.csv",), "rerun"), \
        GoldenCase("", "softmax", (), ("results.csv",), "rerun")
    gone = GoldenCase("", "performer", (), ("results.csv",), "rerun")
    out = tmp_path / "golden.json"
    out.write_text(json.dumps({"steps": STEPS, "batch": BATCH, "seed": SEED,
                               "relative_tolerance": 2e-5, "environment": {"cpu": "before"},
                               "cases": {case_key(kept): {"values": [1.0]},
                                         case_key(gone): {"values": [2.0]}}}))
    monkeypatch.setattr(script, "published_cases", lambda: [kept, added])
    monkeypatch.setattr(script, "run_case", lambda case: [3.0])
    # main() silences warnings process-wide too, as a script may: keep them on here.
    monkeypatch.setattr(script.warnings, "filterwarnings", lambda *args, **kwargs: None)
    with logging_restored(silenced=False):
        assert script.main(["--out", str(out), "--missing-only"]) == 0
    document = json.loads(out.read_text())
    assert document["environment"] == {"cpu": "before"}
    assert document["cases"][case_key(kept)] == {"values": [1.0]}
    assert document["cases"][case_key(added)]["values"] == [3.0]
    assert document["cases"][case_key(added)]["environment"]["cpu_kernels"]
    assert case_key(gone) not in document["cases"]

    out.write_text(json.dumps({**document, "steps": STEPS + 1}))
    with pytest.raises(SystemExit, match="other golden settings"), \
            logging_restored(silenced=False):
        script.main(["--out", str(out), "--missing-only"])
