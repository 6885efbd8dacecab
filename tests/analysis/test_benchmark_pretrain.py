"""scripts/benchmark_pretrain.py and its case, pretrain_step: the training's pretraining step
(PretrainModule, masking, LM head) timed round-robin beside model_step."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from helpers.paths import REPO_ROOT, load_script
from hydra import compose, initialize_config_dir

from linarena.analysis import bench_pretrain
from linarena.analysis.bench_cases import PRETRAIN_STEP, CaseSpec
from linarena.analysis.bench_measure import run_case
from linarena.analysis.bench_pretrain import (
    MIN_ROUNDS,
    make_pretrain_step,
    task_shape,
    time_pair,
)
from linarena.training.build import build_module

CONF = REPO_ROOT / "conf"
LENGTH, BATCH = 16, 3


def tiny_spec(causal: bool, attention: str = "softmax", dropout: float = 0.1) -> CaseSpec:
    shape, fraction = task_shape("listops_small", causal, CONF, tiny=True)
    return CaseSpec(attention=attention, length=LENGTH, what=PRETRAIN_STEP, batch=BATCH,
                    device="cpu", dtype="float32", threads=1, warmup=0, repeats=2,
                    shape=dataclasses.replace(shape, dropout=dropout),
                    conf_dir=str(CONF), mask_fraction=fraction)


def training_module(spec: CaseSpec):
    """The PretrainModule train.py builds for the pretraining stage of the spec's model."""
    shape = spec.shape
    goal = "lm" if shape.causal else "mlm"
    causal = ["model.causal=true", "model.pooling=mean"] if shape.causal else []
    overrides = ["data=listops_small", "task_name=listops_small", f"pretrain={goal}",
                 "pretrain.stage=pretrain", f"attention={spec.attention}", "seed=0",
                 f"data.max_length={spec.length}", f"model.d_model={shape.d_model}",
                 f"model.num_heads={shape.num_heads}", f"model.num_layers={shape.num_layers}",
                 f"model.mlp_dim={shape.mlp_dim}", f"model.dropout={shape.dropout}", *causal]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return build_module(cfg)[1]


def benchmark_tokens(spec: CaseSpec) -> dict[str, torch.Tensor]:
    """The batch both steps train on: model_step's draw."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, spec.shape.vocab_size, (spec.batch, spec.length),
                           generator=generator)
    return {"tokens": tokens, "mask": torch.ones_like(tokens, dtype=torch.bool)}


@pytest.mark.parametrize("causal", [False, True], ids=["mlm", "lm"])
def test_pretrain_step_is_the_training_stage_step(causal: bool) -> None:
    """Same parameters as the training's pretraining model (mask token row, LM head), and with
    the same weights the same loss, bit for bit, at each step (fresh masks per step): a
    benchmark that masked, predicted or scored otherwise would fail here."""
    spec = tiny_spec(causal, dropout=0.0)  # no dropout: the two forward passes draw nothing
    if not causal:
        assert spec.mask_fraction == 0.1  # ListOps' fraction, from conf/pretrain/mlm.yaml
    step, model = make_pretrain_step(spec)
    trained = training_module(spec)
    ours, theirs = model.state_dict(), trained.model.state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    assert ours["lm_head.proj.weight"].shape[0] == spec.shape.vocab_size - 1
    batch = benchmark_tokens(spec)
    for index in range(2):
        trained.model.load_state_dict(model.state_dict())
        expected = trained.predict_tokens(batch, "train", index)[0]
        assert torch.equal(step(), expected.detach())
    assert not any(p.requires_grad for p in model.head.parameters())  # frozen, as in training


def test_time_pair_interleaves_the_two_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake(name: str):
        return lambda spec: ((lambda: calls.append(name)), torch.nn.Linear(1, 1))

    monkeypatch.setattr(bench_pretrain, "make_model_step", fake("M"))
    monkeypatch.setattr(bench_pretrain, "make_pretrain_step", fake("P"))
    monkeypatch.setattr(bench_pretrain, "peak_allocated_mb", lambda fn, device: 0.0)
    # Round r: model_step r + 1 ms, pretrain_step 2 (r + 1) ms, whichever runs first.
    durations = iter([1.0, 2.0, 4.0, 2.0, 3.0, 6.0, 8.0, 4.0])
    monkeypatch.setattr(bench_pretrain, "elapsed", lambda fn, device: (fn(), next(durations))[1])
    results = time_pair(dataclasses.replace(tiny_spec(False), repeats=4))
    # One warmup each (not timed), then rounds in alternating order.
    assert "".join(calls) == "MP" + "MP" + "PM" + "MP" + "PM"
    model, pre = results["model_step"], results[PRETRAIN_STEP]
    assert (model["ms"], model["min_ms"], pre["ms"], pre["min_ms"]) == (2500, 1000, 5000, 2000)
    assert pre["vs_model_step"] == pre["vs_model_step_min"] == 0.5
    assert model["rounds"] == pre["rounds"] == 4
    # A time budget ends the rounds early, but not below MIN_ROUNDS.
    monkeypatch.setattr(bench_pretrain, "elapsed", lambda fn, device: 1.0)
    cut = time_pair(dataclasses.replace(tiny_spec(False), repeats=9), max_seconds=0.5)
    assert cut["model_step"]["rounds"] == cut[PRETRAIN_STEP]["rounds"] == MIN_ROUNDS


def test_time_pair_and_run_case_time_the_real_steps() -> None:
    spec = tiny_spec(False, attention="elu")
    results = time_pair(spec)
    for row in results.values():
        assert row["status"] == "ok" and 0 < row["min_ms"] <= row["ms"]
        assert row["tokens_per_sec"] == pytest.approx(BATCH * LENGTH / (row["ms"] / 1e3))
        assert row["peak_memory_mb"] > 0 and row["backend"] == "torch"
    single = run_case(spec)  # the per-case path (benchmark_model.py's runner) knows it too
    assert single["status"] == "ok" and single["tokens_per_sec"] > 0


def test_tiny_run_writes_csv_ratios_and_a_record_with_the_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    exit_code = load_script("scripts/benchmark_pretrain.py").main([
        "--tiny", "--settings", f"listops_small:{LENGTH}:{BATCH}", "--attentions", "softmax",
        "--objectives", "mlm,lm", "--warmup", "0", "--repeats", "1", "--threads", "1",
        "--device", "cpu", "--out", str(tmp_path)])
    assert exit_code == 0
    rows = pd.read_csv(tmp_path / "benchmark_pretrain.csv")
    assert list(zip(rows["objective"], rows["what"], strict=True)) == [
        ("mlm", "model_step"), ("mlm", PRETRAIN_STEP), ("lm", "model_step"), ("lm", PRETRAIN_STEP)]
    assert (rows["status"] == "ok").all() and (rows["threads"] == 1).all()
    assert (rows["rounds"] == 1).all()
    assert rows["tokens_per_sec"].to_numpy() == pytest.approx(
        (BATCH * LENGTH / (rows["ms"] / 1e3)).to_numpy())
    assert rows["mask_fraction"].tolist()[:2] == [0.1, 0.1]
    assert rows["mask_fraction"][2:].isna().all()  # lm masks nothing
    base, pre = rows.iloc[0], rows.iloc[1]
    # One round: the round's ratio is the medians'.
    assert pre["vs_model_step"] == pytest.approx(pre["tokens_per_sec"] / base["tokens_per_sec"])
    assert pre["vs_model_step_min"] == pytest.approx(base["min_ms"] / pre["min_ms"])
    assert pd.isna(base["vs_model_step"])
    command = json.loads((tmp_path / "provenance.json").read_text())[
        "benchmark_pretrain.csv"]["command"]
    assert command.startswith("OMP_NUM_THREADS=1 python scripts/benchmark_pretrain.py --tiny")


def test_bad_settings_are_one_line_errors(capsys: pytest.CaptureFixture) -> None:
    parse_args = load_script("scripts/benchmark_pretrain.py").parse_args
    for args, message in [(["--settings", "listops_small"], "expected TASK:LENGTH[:BATCH]"),
                          (["--settings", "nosuch:128"], "no task 'nosuch'"),
                          (["--objectives", "clm"], "--objectives: ['clm']")]:
        with pytest.raises(SystemExit):
            parse_args(args)
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
