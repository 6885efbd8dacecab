"""scripts/benchmark_attention.py at tiny sizes: the CSVs it writes and the error table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_benchmark_attention():
    path = REPO_ROOT / "scripts" / "benchmark_attention.py"
    spec = importlib.util.spec_from_file_location("benchmark_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_run_writes_timings_and_performer_errors(tmp_path: Path, capsys) -> None:
    out = tmp_path / "attention.csv"
    load_benchmark_attention().main([
        "--lengths", "32", "64", "--heads", "2", "--head-dim", "8", "--num-features", "16",
        "--warmup", "0", "--repeats", "1", "--device", "cpu", "--out", str(out),
    ])
    rows = pd.read_csv(out)
    linarena = ["softmax", "elu", "performer", "cosformer"]
    assert set(linarena) | {"einsum_elu"} <= set(rows["variant"])
    assert (rows["status"] == "ok").all()
    assert (rows["fwd_ms"] > 0).all() and (rows["fwd_bwd_ms"] > 0).all()
    assert "elu vs einsum_elu, fwd+bwd, N=64" in capsys.readouterr().out

    errors = pd.read_csv(tmp_path / "attention_performer_error.csv")
    assert errors["inputs"].tolist() == ["random"] * 3 + ["clustered"] * 3
    assert errors["qk_scale"].tolist() == [0.25, 0.5, 1.0] * 2
    assert (errors["length"] == 64).all()  # the measured length closest to 4096
    assert (errors["performer"] > 0).all() and (errors["mean_of_v"] > 0).all()
    random = errors[errors["inputs"] == "random"]
    # Error grows with the input scale: the FAVOR+ estimator's variance grows with |q|, |k|.
    assert random["performer"].is_monotonic_increasing
    if "performer_pytorch_eps0" in errors:
        # Same projection, same estimator: linarena equals performer-pytorch without its floor.
        assert errors["performer"].to_numpy() == pytest.approx(
            errors["performer_pytorch_eps0"].to_numpy(), rel=1e-4)


def test_error_table_can_be_skipped(tmp_path: Path) -> None:
    out = tmp_path / "attention.csv"
    load_benchmark_attention().main([
        "--lengths", "16", "--heads", "1", "--head-dim", "8", "--num-features", "8",
        "--variants", "performer", "--warmup", "0", "--repeats", "1", "--device", "cpu",
        "--error-scales", "--out", str(out),
    ])
    assert out.is_file()
    assert not (tmp_path / "attention_performer_error.csv").exists()
