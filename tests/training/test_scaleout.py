"""Scale-out code paths on CPU: DDP over 2 processes, and a multirun through Hydra's submitit
launcher in local mode (the code path of a Slurm sweep)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers.training import run_train

SMOKE = ["debug=smoke", "logger=csv", "trainer.enable_progress_bar=false"]


@pytest.mark.slow
def test_ddp_on_two_cpu_processes_reports_the_global_throughput(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_train(["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", *SMOKE,
                        f"hydra.run.dir={run_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_step"] == 4
    with open(run_dir / "csv" / "version_0" / "metrics.csv") as handle:
        # Rank 0's own running rate, per step (not the run's summary, logged last, with test/acc).
        rank_zero = [float(row["perf/tokens_per_sec"]) for row in csv.DictReader(handle)
                     if row.get("perf/tokens_per_sec") and not row.get("test/acc")]
    # Both ranks' tokens over the slowest rank's time: about twice rank 0's own rate.
    assert summary["metrics"]["perf/tokens_per_sec"] > 1.3 * rank_zero[-1]
    assert "over 2 processes" in result.stdout
    # val/acc_best is the same on every rank and says so (sync_dist): no DDP advice about it.
    assert "val/acc_best', ..., sync_dist=True" not in result.stderr + result.stdout
    # Evaluation reads every example once per run (each rank its own share), so Lightning's
    # advice against a padding DistributedSampler during test does not appear.
    assert "Using `DistributedSampler` with the dataloaders" not in result.stderr + result.stdout


@pytest.mark.slow
def test_a_multirun_through_the_submitit_local_launcher_runs_every_job(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "hydra/launcher=submitit_local", "attention=softmax,elu", *SMOKE,
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/summary.json"))]
    assert [s["attention"] for s in summaries] == ["softmax", "elu"]
    # One sweep for compare.py: the sweep folder (outside outputs/ here, so absolute).
    assert {s["sweep"].split(": ")[0] for s in summaries} == {str(sweep_dir.resolve())}
    assert list(sweep_dir.glob(".submitit/*"))  # submitit, not the basic launcher, ran them


def test_ddp_inside_submitit_local_jobs_is_refused_with_the_ways_out() -> None:
    """Found by running it: submitit's local executor starts tasks_per_node processes without
    SLURM_* variables, so Lightning re-runs submitit's _submit.py as a new rank, which fails
    ("unrecognized arguments: hydra.run.dir=..."). Refused before anything starts instead."""
    from omegaconf import OmegaConf

    from linarena.errors import ConfigError
    from linarena.training.launch import check_ddp_launch

    ddp = OmegaConf.create({"strategy": "ddp", "devices": 2, "accelerator": "cpu", "num_nodes": 1})
    local = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
    with pytest.raises(ConfigError, match=r"LocalLauncher: it does not start DDP ranks"):
        check_ddp_launch(ddp, multirun=True, launcher_target=local)
    check_ddp_launch(OmegaConf.merge(ddp, {"strategy": "ddp_spawn"}), multirun=True,
                     launcher_target=local)
