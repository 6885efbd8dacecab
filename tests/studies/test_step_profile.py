"""scripts/maintainer/profile_step.py and linarena.studies.step_profile: the parts of a study
run's training step (data, forward, backward, optimizer, metrics/logging) and the loop overhead
add up to the whole Lightning step; the CSV has its columns and a provenance record."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import load_script

from linarena.studies.step_profile import (
    COLUMNS,
    OVERHEAD,
    PARTS,
    WHOLE,
    case_overrides,
    largest_imports,
)


def test_parts_and_overhead_add_up_to_the_whole_step(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINARENA_ROOT", str(tmp_path))
    monkeypatch.setenv("LINARENA_DATA_DIR", str(tmp_path / "data"))
    script = load_script("scripts/maintainer/profile_step.py")
    out = tmp_path / "out"
    assert script.main(["--attentions", "elu", "--widths", "16", "--threads", "1", "--steps",
                        "4", "--warmup", "1", "--skip-startup", "--out", str(out)]) == 0
    table = pd.read_csv(out / "step_profile.csv")
    assert list(table.columns) == list(COLUMNS)
    assert set(table["attention"]) == {"elu"} and set(table["steps"]) == {4}
    ms = table.set_index("part")["ms"]
    assert sorted(ms.index) == sorted([*PARTS, OVERHEAD, WHOLE])
    assert (ms[list(PARTS)] > 0).all()
    assert ms[[*PARTS, OVERHEAD]].sum() == pytest.approx(ms[WHOLE], rel=1e-9)
    assert table.set_index("part")["share"][WHOLE] == 1.0
    record = json.loads((out / "provenance.json").read_text())["step_profile.csv"]
    assert "profile_step.py" in record["command"] and record["rows"] == len(table)


def test_cases_are_composed_as_the_study_composes_them() -> None:
    assert case_overrides("elu", 16) == ["attention=elu", "model.d_model=16", "logger=none"]
    assert "model.short_conv=0" in case_overrides("mamba2_layer", 64)
    hybrid = case_overrides("gated_deltanet+softmax", 16)
    assert "model.pattern=[gated_deltanet,softmax]" in hybrid
    assert not any(item.startswith("attention=") for item in hybrid)
    with pytest.raises(ValueError, match="neither"):
        case_overrides("no_such_attention", 16)


def test_largest_imports_reads_importtime_output() -> None:
    stderr = ("import time: self [us] | cumulative | imported package\n"
              "import time:       120 |        120 |   omegaconf._utils\n"
              "import time:      3000 |      45000 | hydra\n"
              "import time:       500 |       9000 | omegaconf\n")
    assert largest_imports(stderr, 2) == [("hydra", 45.0), ("omegaconf", 9.0)]
