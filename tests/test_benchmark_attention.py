"""The attention benchmark (linarena.analysis.attention_benchmark, behind
scripts/benchmark_attention.py) at tiny sizes: the CSVs it writes and the error table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import VARIANTS

from linarena.analysis.attention_benchmark import main

TINY = ["--heads", "2", "--head-dim", "8", "--warmup", "0", "--repeats", "1", "--device", "cpu"]


def test_tiny_run_writes_timings_and_performer_errors(tmp_path: Path, capsys) -> None:
    out = tmp_path / "attention.csv"
    main(["--lengths", "32", "64", *TINY, "--out", str(out)])
    rows = pd.read_csv(out)
    assert set(VARIANTS) | {"einsum_elu"} <= set(rows["variant"])
    assert (rows["status"] == "ok").all()
    assert (rows["fwd_ms"] > 0).all() and (rows["fwd_bwd_ms"] > 0).all()
    assert "elu vs einsum_elu, fwd+bwd, N=64" in capsys.readouterr().out

    errors = pd.read_csv(tmp_path / "attention_performer_error.csv")
    assert errors["inputs"].tolist() == ["random"] * 3 + ["clustered"] * 3
    assert errors["qk_scale"].tolist() == [0.25, 0.5, 1.0] * 2
    assert (errors["length"] == 64).all()  # the measured length closest to 4096
    records = json.loads((tmp_path / "provenance.json").read_text())
    assert set(records) == {"attention.csv", "attention_performer_error.csv"}
    assert records["attention.csv"]["command"].startswith("python scripts/benchmark_attention.py")
    assert (errors["performer"] > 0).all() and (errors["mean_of_v"] > 0).all()
    random = errors[errors["inputs"] == "random"]
    # Error grows with the input scale: the FAVOR+ estimator's variance grows with |q|, |k|.
    assert random["performer"].is_monotonic_increasing
    if "performer_pytorch_eps0" in errors:
        # Same projection, same estimator: linarena equals performer-pytorch without its floor.
        assert errors["performer"].to_numpy() == pytest.approx(
            errors["performer_pytorch_eps0"].to_numpy(), rel=1e-4)


def test_one_variant_gets_a_row_and_no_conclusions_about_the_others(tmp_path: Path,
                                                                    capsys) -> None:
    out = tmp_path / "attention.csv"
    main(["--lengths", "16", *TINY, "--variants", "performer", "--no-references",
          "--error-scales", "--out", str(out)])
    assert pd.read_csv(out)["variant"].tolist() == ["performer"]
    assert not (tmp_path / "attention_performer_error.csv").exists()
    printed = capsys.readouterr().out
    assert "faster" not in printed and "softmax" not in printed


def test_unknown_variants_are_an_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--variants", "elu", "flash", "--out", str(tmp_path / "x.csv")])
    assert "unknown attention variant(s) ['flash']" in capsys.readouterr().err
