"""Helpers for the training and config tests: compose configs as train.py would, run train.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import DictConfig, open_dict

from helpers.paths import REPO_ROOT as REPO
from linarena.training import build
from linarena.training.config_checks import check_config

CONF = REPO / "conf"
TRAIN_PY = REPO / "train.py"


def config_names(group: str) -> list[str]:
    """Names of the configs of a group, e.g. "lra/text" for conf/experiment/lra/text.yaml."""
    folder = CONF / group
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml"))


def compose_with_hydra(overrides: list[str]) -> DictConfig:
    """The composed config including its `hydra` node (launcher, sweeper, run dirs)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def compose_config(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """The job config train.py would see for these overrides. With output_dir, Hydra's runtime
    config is installed too, so ${hydra:runtime.output_dir} (paths.output_dir) resolves."""
    cfg = compose_with_hydra(overrides)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(output_dir)
            cfg.hydra.runtime.cwd = str(REPO)
            cfg.hydra.job.num = 0
        HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def build_model(overrides: list[str]):
    """Compose and check a config, then build its datamodule (constructor only: no data is
    read) and its model, as training/build.py does. Returns (cfg, datamodule, model)."""
    cfg = compose_config(overrides)
    check_config(cfg)
    datamodule = instantiate(cfg.data, data_dir="unused")
    return cfg, datamodule, build.build_model(cfg, datamodule)


def train_env(
    tmp_path: Path, data_dir: Path, env: dict[str, str] | None = None
) -> dict[str, str]:
    """Environment for a train.py subprocess: offline W&B in tmp, the repo's src importable;
    `env` entries are added last (an empty value removes the variable)."""
    # tests/ too, so that configs can name the callbacks of this file.
    paths = (str(REPO / "src"), str(REPO / "tests"), os.environ.get("PYTHONPATH"))
    python_path = os.pathsep.join(p for p in paths if p)
    merged = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wandb_home"),
        "WANDB_SILENT": "true",
        "LINARENA_DATA_DIR": str(data_dir),
        "LINARENA_ROOT": str(tmp_path),  # outputs/ under tmp_path, not in the repository
        "PYTHONPATH": python_path,
        "HYDRA_FULL_ERROR": "0",
        **(env or {}),
    }
    return {key: value for key, value in merged.items() if value != ""}


def run_train(
    args: list[str], tmp_path: Path, data_dir: Path, timeout: int = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """python train.py *args, from tmp_path, capturing output (`env`: see train_env)."""
    return subprocess.run(
        [sys.executable, str(TRAIN_PY), *args],
        cwd=tmp_path,
        env=train_env(tmp_path, data_dir, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class PoisonWeights(Callback):
    """Writes NaN into the model's weights after training step `at_step` (simulates divergence)."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if trainer.global_step == self.at_step:
            with torch.no_grad():
                pl_module.model.final_norm.weight.fill_(float("nan"))


class PoisonOptimizerAboveLr(Callback):
    """From step `from_step` on, while the learning rate is above `max_lr`, makes AdamW's
    exp_avg_sq infinite (weights stay finite): a divergence that a lower lr avoids."""

    def __init__(self, max_lr: float, from_step: int) -> None:
        self.max_lr, self.from_step = max_lr, from_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        optimizer = trainer.optimizers[0]
        if trainer.global_step >= self.from_step and optimizer.param_groups[0]["lr"] > self.max_lr:
            for state in list(optimizer.state.values())[:2]:
                state["exp_avg_sq"].fill_(float("inf"))


class SignalAtStep(Callback):
    """Sends `signal_name` (e.g. SIGTERM, SIGKILL) to this process after training step `step`,
    once: the file `once` records that it did (a resumed run keeps the callback)."""

    def __init__(self, step: int, signal_name: str, once: str) -> None:
        self.step, self.signal_name, self.once = step, signal_name, Path(once)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step and not self.once.exists():
            self.once.touch()
            os.kill(os.getpid(), getattr(signal, self.signal_name))


def skip_without_logger_packages(logger: str) -> None:
    """Skip the calling test when `logger=<logger>` needs an optional package (its YAML's
    `_requires_`) that is not installed."""
    import pytest

    from linarena.training.build import logger_nodes, missing_requirement

    for node in logger_nodes(compose_config([f"logger={logger}"])).values():
        package = missing_requirement(node)
        if package is not None:
            pytest.skip(f"logger={logger} needs the package {package}, which is not installed")
