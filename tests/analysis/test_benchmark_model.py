"""scripts/benchmark_model.py at tiny sizes, and the runner's oom / skip / error handling."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.attention import VARIANTS
from helpers.paths import REPO_ROOT, load_script
from PIL import Image

from linarena.analysis import bench_cases, bench_measure
from linarena.analysis.bench_cases import TINY_MODEL, CaseSpec
from linarena.analysis.bench_runner import exit_code, run_benchmark, skip_reason
from linarena.analysis.timing import time_fn


def make_spec(length: int, attention: str = "softmax", what: str = "model_step") -> CaseSpec:
    return CaseSpec(attention=attention, length=length, what=what, batch=2, device="cpu",
                    dtype="float32", threads=1, warmup=0, repeats=1, shape=TINY_MODEL,
                    conf_dir=str(REPO_ROOT / "conf"))


def test_tiny_benchmark_writes_csv_and_plot_and_skips_slow_cases(tmp_path: Path) -> None:
    """Each case runs in its own process; a --max-seconds this small skips every longer length."""
    exit_code = load_script("scripts/benchmark_model.py").main([
        "--tiny", "--device", "cpu", "--attentions", "softmax", "--lengths", "16,32",
        "--warmup", "0", "--repeats", "1", "--max-seconds", "1e-9", "--threads", "1",
        "--out", str(tmp_path),
    ])
    assert exit_code == 0
    records = json.loads((tmp_path / "provenance.json").read_text())
    assert set(records) == {"benchmark_model.csv", "benchmark_model.png"}
    rows = pd.read_csv(tmp_path / "benchmark_model.csv", keep_default_na=False)
    assert len(rows) == 2 * 2  # what x length
    assert set(rows["what"]) == {"model_step", "attention_fwd_bwd"}
    assert (rows["device"] == "cpu").all() and (rows["dtype"] == "float32").all()
    assert (rows["batch"] == 1).all()  # the CPU default
    assert (rows["threads"] == 1).all()
    measured = rows[rows["length"] == 16]
    assert (measured["status"] == "ok").all(), measured["note"].tolist()
    ms = measured["ms"].astype(float)
    assert (ms > 0).all()
    assert measured["tokens_per_sec"].astype(float).to_numpy() == pytest.approx(
        (16 / (ms / 1000)).to_numpy(), rel=1e-6)
    assert (measured["peak_memory_mb"].astype(float) >= 0).all()
    assert (measured["backend"] == "torch").all()  # --backend auto on a CPU machine
    skipped = rows[rows["length"] == 32]
    assert (skipped["status"] == "skipped").all()
    assert skipped["note"].str.contains("--max-seconds").all()
    assert (skipped["ms"] == "").all()
    with Image.open(tmp_path / "benchmark_model.png") as image:
        assert image.format == "PNG"
    # --replot redraws the figure from the CSV alone: no case runs, the CSV stays as it was.
    csv_before = (tmp_path / "benchmark_model.csv").read_bytes()
    (tmp_path / "benchmark_model.png").unlink()
    assert load_script("scripts/benchmark_model.py").main(["--replot", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "benchmark_model.csv").read_bytes() == csv_before
    assert (tmp_path / "benchmark_model.png").is_file()
    records = json.loads((tmp_path / "provenance.json").read_text())
    assert "--replot" in records["benchmark_model.png"]["command"]
    assert "--replot" not in records["benchmark_model.csv"]["command"]


@pytest.mark.parametrize("what", ["model_step", "attention_fwd_bwd"])
def test_every_attention_config_runs(what: str) -> None:
    """Every conf/attention/*.yaml builds (cosFormer's interpolation too) and gives numbers."""
    attentions = VARIANTS
    rows = run_benchmark([make_spec(24, name, what) for name in attentions], max_seconds=None,
                         isolate=False)
    assert [row["attention"] for row in rows] == attentions
    assert all(row["status"] == "ok" for row in rows), [row["note"] for row in rows]
    assert all(row["ms"] > 0 and row["tokens_per_sec"] > 0 for row in rows)


def test_unknown_attention_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown attention variant\(s\) \['flash'\]: "
                                         r"valid names are \['softmax', "):
        bench_cases.load_attention_partial(make_spec(16, "flash"))


def test_wandb_offline_logs_table_and_plot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    exit_code = load_script("scripts/benchmark_model.py").main([
        "--tiny", "--device", "cpu", "--attentions", "elu", "--lengths", "16",
        "--what", "attention_fwd_bwd", "--repeats", "1", "--out", str(tmp_path / "out"), "--wandb",
    ])
    assert exit_code == 0
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(run_dir.rglob("*.table.json")) and list(run_dir.rglob("*.png"))


def test_oom_is_a_result_and_longer_lengths_are_skipped(monkeypatch) -> None:
    def fake_model_step(spec: CaseSpec):
        if spec.length >= 32:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return (lambda: None), torch.nn.Module()

    monkeypatch.setattr(bench_measure, "make_model_step", fake_model_step)
    rows = run_benchmark([make_spec(16), make_spec(32), make_spec(64)], max_seconds=None,
                         isolate=False)
    assert [row["status"] for row in rows] == ["ok", "oom", "skipped"]
    assert rows[1]["ms"] is None and rows[1]["peak_memory_mb"] is None
    assert rows[2]["note"] == "length 32 was oom"


def test_cpu_allocator_failure_counts_as_oom(monkeypatch) -> None:
    def fake_model_step(spec: CaseSpec):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1e12")

    monkeypatch.setattr(bench_measure, "make_model_step", fake_model_step)
    assert run_benchmark([make_spec(16)], max_seconds=None, isolate=False)[0]["status"] == "oom"


def test_other_errors_are_reported_not_hidden_as_oom(monkeypatch) -> None:
    def broken_model_step(spec: CaseSpec):
        raise ValueError("shape mismatch in layer 0")

    monkeypatch.setattr(bench_measure, "make_model_step", broken_model_step)
    rows = run_benchmark([make_spec(16), make_spec(32)], max_seconds=None, isolate=False)
    assert rows[0]["status"] == "error" and "shape mismatch in layer 0" in rows[0]["note"]
    assert rows[1]["status"] == "skipped"


def test_skip_prediction_grows_quadratically_for_softmax_only() -> None:
    previous = {"length": 1024, "status": "ok", "ms": 1000.0}  # 1 s per step, 1 step per case
    # softmax: 1 s x (2048/1024)^2 = 4 s; the linear attentions: 2 s.
    assert skip_reason(make_spec(2048, "softmax"), previous, max_seconds=3.0) is not None
    assert skip_reason(make_spec(2048, "softmax"), previous, max_seconds=5.0) is None
    assert skip_reason(make_spec(2048, "performer"), previous, max_seconds=3.0) is None
    assert skip_reason(make_spec(2048, "performer"), previous, max_seconds=1.5) is not None
    assert skip_reason(make_spec(2048, "performer"), previous, max_seconds=None) is None
    assert skip_reason(make_spec(1024, "softmax"), None, max_seconds=1e-9) is None


def test_time_fn_returns_the_median_call_time() -> None:
    delays = iter([0.0, 0.2, 0.0, 0.05])  # the first call is warmup; the median of the rest 0.05

    def sleep_next() -> None:
        time.sleep(next(delays))

    seconds = time_fn(sleep_next, warmup=1, repeats=3, device="cpu")
    assert 0.05 <= seconds < 0.2


def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("")
    parse_args = load_script("scripts/benchmark_model.py").parse_args
    for args, message in [
        (["--lengths", "-5"], "argument --lengths: must be a positive integer, got -5"),
        (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
        (["--out", str(tmp_path / "file" / "x")], "is a file, not a folder"),
        (["--out", str(tmp_path / "file")], "is a file; --out is the folder"),
    ]:
        with pytest.raises(SystemExit):
            parse_args(args)
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_a_whole_layer_is_timed_alone_and_in_the_model(tmp_path: Path) -> None:
    """A layer (x -> x) is timed on x in attention_fwd_bwd, where a core gets q, k, v."""
    assert load_script("scripts/benchmark_model.py").main([
        "--tiny", "--device", "cpu", "--attentions", "gla_layer", "--lengths", "16",
        "--warmup", "0", "--repeats", "1", "--threads", "1", "--out", str(tmp_path),
    ]) == 0
    rows = pd.read_csv(tmp_path / "benchmark_model.csv", keep_default_na=False)
    assert set(rows["what"]) == {"model_step", "attention_fwd_bwd"}
    assert (rows["status"] == "ok").all(), rows["note"].tolist()


def test_a_benchmark_fails_only_for_a_case_that_raised(capsys: pytest.CaptureFixture) -> None:
    # Out of memory and skipped lengths are results of the benchmark, not failures of it.
    assert exit_code([{"status": "ok"}, {"status": "oom"}, {"status": "skipped"}]) == 0
    assert exit_code([{"status": "ok"}, {"status": "error"}, {"status": "error"}]) == 1
    assert "2 case(s) failed with an error" in capsys.readouterr().err
