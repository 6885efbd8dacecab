"""End-to-end training runs on tiny generated ListOps data (debug=smoke), on CPU."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest
import torch
import wandb
import yaml
from helpers.training import compose_config, run_train
from hydra.core.hydra_config import HydraConfig

from linarena.attention.variants import variant_names
from linarena.metrics import summary_metrics
from linarena.training import ClassificationModule, train
from linarena.training.entry import run_job

SUMMARY_KEYS = {"schema_version", "task", "attention", "seed", "hparams", "metrics", "wandb",
                "output_dir", "device", "duration_s", "cpu_s", "commit", "config"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One generated-data folder for the whole module (the data do not depend on the run)."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(autouse=True)
def offline_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    HydraConfig.instance().cfg = None


def smoke_config(output_dir: Path, data_dir: Path, *overrides: str, logger: str = "csv"):
    return compose_config(
        ["debug=smoke", f"logger={logger}", f"paths.data_dir={data_dir}",
         "trainer.enable_progress_bar=false", *overrides],
        output_dir=output_dir,
    )


def read_summary(output_dir: Path) -> dict:
    return json.loads((output_dir / "summary.json").read_text())


# Every variant of conf/attention/, the whole layers included: a new one is trained here too.
@pytest.mark.parametrize("attention", variant_names())
def test_smoke_run_trains_tests_and_writes_summary(
    attention: str, tmp_path: Path, data_dir: Path
) -> None:
    output_dir = tmp_path / "run"
    best = train(smoke_config(output_dir, data_dir, f"attention={attention}"))

    summary = read_summary(output_dir)
    assert set(summary) >= SUMMARY_KEYS
    assert (summary["task"], summary["attention"], summary["seed"]) == (
        "listops_small", attention, 1)
    assert summary["debug"] is True and summary["world_size"] == 1
    assert summary["global_step"] == 4
    # the process's CPU time over the run: no more than every core for its whole wall time
    # (both rounded to 0.1 s)
    assert 0 < summary["cpu_s"] <= (summary["duration_s"] + 0.1) * os.cpu_count()
    metrics = summary["metrics"]
    assert set(metrics) == {metric.key for metric in summary_metrics()}
    assert 0.0 <= metrics["test/acc"] <= 1.0 and math.isfinite(metrics["test/loss"])
    assert metrics["val/acc_best"] == pytest.approx(best)
    assert metrics["perf/tokens_per_sec"] > metrics["perf/samples_per_sec"] > 0
    assert metrics["model/params"] > 0 and metrics["perf/peak_memory_mb"] > 0
    assert summary["hparams"]["precision"] == "32-true"
    assert ((summary["hparams"]["attention"].get("num_features") == 256)
            == (attention == "performer"))
    assert "data_dir" not in summary["hparams"]["data"]  # where the data live is no setting
    assert (output_dir / "checkpoints" / "last.ckpt").is_file()

    with open(output_dir / "csv" / "version_0" / "metrics.csv") as handle:
        columns = set(next(csv.reader(handle)))
    assert {"train/loss", "train/acc", "train/lr", "val/loss", "val/acc", "val/acc_best",
            "test/acc", "test/loss", "perf/tokens_per_sec", "perf/samples_per_sec",
            "perf/peak_memory_mb", "model/params"} <= columns


def test_resume_from_last_checkpoint_continues_the_steps_and_the_wandb_run(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output_dir = tmp_path / "run"
    seen = {}
    original_finish = wandb.finish

    def inspecting_finish(*args, **kwargs):
        seen["config"] = dict(wandb.run.config)
        seen["summary"] = dict(wandb.run.summary)
        seen["run"] = (wandb.run.group, wandb.run.name, wandb.run.job_type, set(wandb.run.tags))
        return original_finish(*args, **kwargs)

    monkeypatch.setattr(wandb, "finish", inspecting_finish)
    train(smoke_config(output_dir, data_dir, "attention=performer", logger="wandb"))
    first = read_summary(output_dir)
    assert first["global_step"] == 4 and first["wandb"]["mode"] == "offline"
    # What scripts/compare.py and the W&B workspace rely on.
    # debug=smoke: a debug run, grouped apart from the real ones.
    assert seen["run"] == ("debug", "performer-s1", "performer",
                           {"listops_small", "performer", "debug"})
    assert (seen["config"]["task"], seen["config"]["attention"], seen["config"]["seed"]) == (
        "listops_small", "performer", 1)
    assert seen["config"]["model"]["d_model"] == 32
    for key, value in first["metrics"].items():
        assert seen["summary"][key] == pytest.approx(value), key
    assert seen["summary"]["comparison"]["_type"] == "table-file"  # the workspace's table panel

    steps_run = []
    original_step = ClassificationModule.training_step

    def counting_step(self, batch, batch_idx):
        steps_run.append(self.global_step)
        return original_step(self, batch, batch_idx)

    monkeypatch.setattr(ClassificationModule, "training_step", counting_step)
    train(smoke_config(output_dir, data_dir, "attention=performer", "ckpt_path=last",
                       "trainer.max_steps=8", logger="wandb"))
    second = read_summary(output_dir)

    assert steps_run == [4, 5, 6, 7]  # continued, not restarted
    assert second["global_step"] == 8
    assert second["wandb"]["id"] == first["wandb"]["id"]
    # val/acc_best is kept in the checkpoint, so the resumed run never reports a lower best.
    assert second["metrics"]["val/acc_best"] >= first["metrics"]["val/acc_best"]
    checkpoint = torch.load(output_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8


# gla, deltanet: NaN weights give NaN log gates and betas, which must reach the loss (and the
# divergence report) rather than stop the run in the ops' checks of their input conventions.
@pytest.mark.parametrize("attention", ["elu", "gla", "deltanet"])
def test_diverging_run_stops_with_a_message_and_keeps_the_last_good_checkpoint(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture, attention: str
) -> None:
    output_dir = tmp_path / "run"
    cfg = smoke_config(
        output_dir, data_dir, f"attention={attention}", "trainer.max_steps=6",
        "+callbacks.poison._target_=helpers.training.PoisonWeights", "+callbacks.poison.at_step=3",
    )
    with pytest.raises(SystemExit) as exit_info:
        run_job(cfg)
    assert exit_info.value.code == 1
    message = capsys.readouterr().err
    # Found when the next checkpoint (step 4) was about to be written; that one is not saved.
    assert f"diverged by step 4 with attention={attention}" in message
    assert f"{output_dir / 'checkpoints' / 'last.ckpt'}, step 2" in message

    checkpoint = torch.load(output_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 2  # saved at the last validation before the divergence
    assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())
    # The run is a result (this setting fails), said as such: no accuracy, and why.
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["metrics"]["test/acc"] is None and summary["metrics"]["val/acc_best"] is None
    assert "diverged by step 4" in summary["diverged"] and summary["global_step"] == 4


def test_multirun_gives_each_job_its_own_folder_summary_and_wandb_run(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(
        ["-m", "attention=softmax,elu", "debug=smoke", "trainer.enable_progress_bar=false",
         f"hydra.sweep.dir={sweep_dir}"],
        tmp_path, data_dir,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    assert [s["attention"] for s in summaries] == ["softmax", "elu"]
    assert len({s["output_dir"] for s in summaries}) == 2
    assert len({s["wandb"]["id"] for s in summaries}) == 2
    for summary in summaries:
        run_dir = Path(summary["wandb"]["dir"])
        assert run_dir.parent == Path(summary["output_dir"]) / "wandb"
        assert (run_dir.name.startswith("offline-run-")
                and run_dir.name.endswith(summary["wandb"]["id"]))
        assert list(run_dir.glob("*.wandb")), "the W&B run was not written"
    assert "wandb sync" in result.stdout


def test_optuna_search_runs_trials_and_reports_the_best_val_accuracy(
    tmp_path: Path, data_dir: Path
) -> None:
    sweep_dir = tmp_path / "search"
    result = run_train(
        ["hparams_search=optuna", "hydra.sweeper.n_trials=2",
         "hydra.sweeper.sampler.n_startup_trials=2", "debug=smoke", "logger=none",
         "trainer.enable_progress_bar=false", f"hydra.sweep.dir={sweep_dir}"],
        tmp_path, data_dir,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summaries = [json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")]
    assert len(summaries) == 2
    assert len({s["hparams"]["lr"] for s in summaries}) == 2  # the search varied optim.lr
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    best_val = max(s["metrics"]["val/acc_best"] for s in summaries)
    assert results["best_value"] == pytest.approx(best_val)
    assert set(results["best_params"]) == {"optim.lr", "optim.weight_decay", "model.dropout"}
