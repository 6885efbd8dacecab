"""scripts/maintainer/compile_benchmark.py (issue #27: a measured answer to "does Inductor speed
up the cores?"): one row per core and mode with both times and the compiling call, written
with provenance; whole layers refused. Inductor itself is stood in for by the eager module
here (compiling takes minutes); the script's numbers come from running it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.paths import load_script


def test_a_row_per_core_and_mode_with_provenance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    script = load_script("scripts/maintainer/compile_benchmark.py")
    monkeypatch.setattr(torch, "compile", lambda module, backend: module)
    out = tmp_path / "compile.csv"
    assert script.main(["--attentions", "elu", "--length", "32", "--repeats", "1",
                        "--out", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table["causal"]) == [False, True]
    assert {"eager_ms", "inductor_ms", "speedup", "first_call_s"} <= set(table.columns)
    assert (table["speedup"] > 0).all()
    assert "compile_benchmark.py" in json.loads((tmp_path / "provenance.json").read_text())[
        "compile.csv"]["command"]


def test_whole_layers_are_refused(capsys: pytest.CaptureFixture) -> None:
    script = load_script("scripts/maintainer/compile_benchmark.py")
    assert script.main(["--attentions", "gla_layer"]) == 2
    assert "whole layers" in capsys.readouterr().err
