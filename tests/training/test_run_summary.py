"""summary.json is the same whichever loggers a run has (every file of conf/logger/, and a list
of them): written always, with schema_version and the resolved config; the run's sweep is the one
it started in, also after a resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from helpers.training import compose_config, config_names, run_train, skip_without_logger_packages
from hydra.core.hydra_config import HydraConfig

from linarena.metrics import SCHEMA_VERSION, measured_metrics, summary_metrics
from linarena.system import cpu_model
from linarena.training import train
from linarena.training.summary import round_floats, sweep_label

# Fields that differ between two identical runs, or name a logger's own run: a logger's hook
# (run_report.SummaryHook.summary_fields) may add a field under its own conf/logger/ name.
PER_RUN = ("output_dir", "duration_s", "cpu_s", *config_names("logger"))
MEASURED = {metric.key for metric in measured_metrics()}
LOGGERS = [*config_names("logger"), "[csv,wandb]"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(autouse=True)
def offline_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    HydraConfig.instance().cfg = None


def comparable(summary: dict) -> dict:
    """The summary without what differs between two runs of one config (the run folder, timings)
    or names the logger."""
    text = json.dumps(summary).replace(summary["output_dir"], "<run folder>")
    kept = {key: value for key, value in json.loads(text).items() if key not in PER_RUN}
    kept["metrics"] = {k: v for k, v in kept["metrics"].items() if k not in MEASURED}
    kept["config"] = {k: v for k, v in kept["config"].items() if k not in ("logger", "paths")}
    return kept


def smoke_summary(tmp_path: Path, data_dir: Path, logger: str) -> dict:
    output_dir = tmp_path / f"run-{logger}"
    cfg = compose_config(["debug=smoke", f"logger={logger}", f"paths.data_dir={data_dir}",
                          "trainer.enable_progress_bar=false"], output_dir=output_dir)
    train(cfg)
    HydraConfig.instance().cfg = None
    return json.loads((output_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict:
    """The summary of the run without any logger."""
    import os

    os.environ.setdefault("WANDB_MODE", "offline")
    return smoke_summary(tmp_path_factory.mktemp("reference"), data_dir, "none")


@pytest.mark.parametrize("logger", LOGGERS)
def test_every_logger_gives_the_same_summary(
    logger: str, reference: dict, tmp_path: Path, data_dir: Path
) -> None:
    skip_without_logger_packages(logger)
    summary = smoke_summary(tmp_path, data_dir, logger)
    assert summary["schema_version"] == SCHEMA_VERSION
    assert set(summary["metrics"]) == {metric.key for metric in summary_metrics()}
    assert summary["config"]["model"]["d_model"] == summary["hparams"]["d_model"]
    assert summary["attention_backend"] == "torch"  # what ran, on this CPU machine
    # What the numbers depend on beyond code and seed (issue #26: the machine of every run).
    assert summary["machine"]["cpu"] == cpu_model() and summary["machine"]["gpu"] is None
    assert summary["machine"]["cpu_kernels"] == torch.backends.cpu.get_cpu_capability()
    assert comparable(summary) == comparable(reference)
    assert (summary["wandb"] is not None) == ("wandb" in logger)
    if "csv" in logger:  # the summary's metrics reached the CSV logger too
        rows = (tmp_path / f"run-{logger}" / "csv" / "version_0" / "metrics.csv").read_text()
        assert str(summary["metrics"]["model/params"]) in rows


def test_a_resumed_job_keeps_the_sweep_it_started_in(tmp_path: Path) -> None:
    """A multirun job resumed as a single run (ckpt_path=last hydra.run.dir=<job>, other
    overrides) is still filed under its multirun folder and its own overrides."""
    job = tmp_path / "outputs" / "multiruns" / "2025-01-01_10-00-00" / "0_elu_s2"
    (job / ".hydra").mkdir(parents=True)
    started = {"hydra": {
        "mode": "MULTIRUN",
        "sweep": {"dir": "${paths.log_dir}/multiruns/${now:%Y-%m-%d_%H-%M-%S}",
                  "subdir": "${hydra.job.num}_${hydra.runtime.choices.attention}_s${seed}"},
        "overrides": {"task": ["attention=elu", "seed=2", "optim.lr=0.0031622776601683794"]},
    }}
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(started))
    cfg = compose_config(["ckpt_path=last", "optim.lr=0.0001",
                          f"paths.log_dir={tmp_path / 'outputs'}"], output_dir=job)
    assert sweep_label(cfg) == "multiruns/2025-01-01_10-00-00: optim.lr=0.003162"


def test_long_decimals_in_sweep_labels_are_rounded() -> None:
    assert round_floats("optim.lr=0.0031622776601683794 model.dropout=0.1") == \
        "optim.lr=0.003162 model.dropout=0.1"
    assert round_floats("seed=12345 tag=v1.234567") == "seed=12345 tag=v1.234567"


@pytest.mark.slow
def test_resume_switches_from_wandb_to_csv_and_keeps_its_sweep(
    tmp_path: Path, data_dir: Path
) -> None:
    """A job of a W&B multirun, resumed with logger=csv as the README allows: it trains on,
    logs to CSV, and stays in its sweep (also when its saved config names the W&B callback
    that older versions used)."""
    started = run_train(["-m", "debug=smoke", "attention=softmax", "logger=wandb",
                         "trainer.max_steps=4"], tmp_path, data_dir)
    assert started.returncode == 0, started.stderr[-3000:]
    (summary_path,) = (tmp_path / "outputs" / "multiruns").rglob("summary.json")
    before = json.loads(summary_path.read_text())
    assert before["wandb"] is not None
    # As saved by runs started before the W&B summary became the logger's hook: a callback.
    saved = summary_path.parent / ".hydra" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    config["callbacks"]["wandb_summary"] = {
        "_target_": "linarena.training.wandb_summary.WandbSummary", "task": "listops_small",
        "attention": "softmax", "seed": 1}
    saved.write_text(yaml.safe_dump(config))
    resumed = run_train(["ckpt_path=last", f"hydra.run.dir={summary_path.parent}", "logger=csv",
                         "trainer.max_steps=6"], tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = json.loads(summary_path.read_text())
    assert after["global_step"] == 6 and after["wandb"] is None
    assert after["sweep"] == before["sweep"] and before["sweep"].startswith("multiruns/")
    assert (summary_path.parent / "csv").is_dir()
