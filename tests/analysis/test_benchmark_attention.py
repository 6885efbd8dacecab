"""The attention benchmark (linarena.analysis.attention_benchmark, behind
scripts/benchmark_attention.py) at tiny sizes: the CSVs it writes and the error table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.attention import VARIANTS
from helpers.paths import REPO_ROOT, load_script

from linarena.analysis.attention_benchmark import main, parse_args, speed_ratio
from linarena.analysis.timing import peak_allocated_mb
from linarena.attention.variants import is_layer

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


def test_performer_equals_performer_pytorch_without_its_floor(tmp_path: Path) -> None:
    """Same projection, same estimator: linarena's FAVOR+ equals performer-pytorch's with its
    feature floor removed (eps=0), on every input of the error table."""
    pytest.importorskip("performer_pytorch", reason="the peer is in the dev and bench extras")
    out = tmp_path / "attention.csv"
    main(["--lengths", "64", *TINY, "--variants", "performer", "--out", str(out)])
    errors = pd.read_csv(tmp_path / "attention_performer_error.csv")
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


BAD_ARGS = [
    (["--lengths", "-5"], "argument --lengths: must be a positive integer, got -5"),
    (["--lengths", "256,x"], "argument --lengths: expected a positive integer, got 'x'"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--head-dim", "0"], "argument --head-dim: must be a positive integer, got 0"),
    (["--max-seconds", "-1"], "argument --max-seconds: must be a positive number"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_arguments_are_one_line_errors(args, message, tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_out_under_a_file_is_an_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        main(["--lengths", "16", *TINY, "--out", str(tmp_path / "file" / "x.csv")])
    assert "file is a file, not a folder; choose another --out" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the message without CUDA")
def test_cuda_without_cuda_is_an_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--device", "cuda", "--out", str(tmp_path / "x.csv")])
    assert "--device cuda: no CUDA device is visible" in capsys.readouterr().err


def test_lengths_and_out_are_read_as_benchmark_model_reads_them(tmp_path: Path,
                                                                monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    model_args = load_script("scripts/benchmark_model.py").parse_args
    for lengths in (["512", "256"], ["256,512"], ["256,", "512"]):
        assert parse_args(["--lengths", *lengths]).lengths == [256, 512]
        assert model_args(["--lengths", *lengths]).lengths == [256, 512]
    assert parse_args(["--out", "a/b.csv"]).out == tmp_path / "a" / "b.csv"
    assert model_args(["--out", "a"]).out == tmp_path / "a"
    assert parse_args([]).out.parent == model_args([]).out == REPO_ROOT / "outputs" / "benchmarks"


def test_a_slower_variant_is_called_slower() -> None:
    assert speed_ratio(reference_ms=79.0, ours_ms=100.0) == "1.27x slower"
    assert speed_ratio(reference_ms=200.0, ours_ms=100.0) == "2.00x faster"


def test_peak_memory_counts_what_a_call_holds_at_once() -> None:
    """Two 4 MiB tensors alive together, then freed: the peak is 8 MiB on CPU, whatever the C
    library does with the freed pages."""
    x = torch.zeros(2**20)  # 4 MiB of float32

    def two_at_once() -> None:
        doubled = x * 2
        (doubled + 1).sum()

    assert peak_allocated_mb(two_at_once, torch.device("cpu")) == pytest.approx(8.0, abs=0.01)


def test_memory_and_backend_columns(tmp_path: Path) -> None:
    """Every measured row has a CPU memory figure and names the code that ran; a linear
    variant holds less than softmax's scores at a length where they dominate."""
    out = tmp_path / "attention.csv"
    main(["--lengths", "512", *TINY, "--variants", "elu,retnet", "--no-references",
          "--error-scales", "--out", str(out)])
    rows = pd.read_csv(out).set_index("variant")
    assert (rows["peak_memory_mb"] > 0).all()
    assert rows["backend"].tolist() == ["torch", "torch"]


def test_backend_fla_skips_what_it_cannot_run(tmp_path: Path, capsys) -> None:
    """--backend fla on a CPU machine: the feature map (no fla kernel) and the recurrence (no
    CUDA, or a bidirectional layer) are skipped, each with the reason; nothing runs, one line."""
    with pytest.raises(SystemExit, match="no variant can run with --backend fla"):
        main(["--lengths", "16", *TINY, "--variants", "elu,retnet", "--backend", "fla",
              "--no-references", "--error-scales", "--out", str(tmp_path / "a.csv")])
    printed = capsys.readouterr().out
    assert "skipping elu:" in printed and "fla-core has no kernel" in printed
    assert "skipping retnet:" in printed and "bidirectional" in printed
    assert not (tmp_path / "a.csv").exists()


def test_a_whole_layer_is_sent_to_the_model_benchmark(capsys: pytest.CaptureFixture) -> None:
    """The attention benchmark times cores on q, k, v; a layer has its own projections."""
    assert not any(is_layer(name) for name in parse_args([]).variants)
    with pytest.raises(SystemExit):
        parse_args(["--attentions", "elu,gla_layer"])
    assert "scripts/benchmark_model.py --attentions gla_layer" in capsys.readouterr().err
