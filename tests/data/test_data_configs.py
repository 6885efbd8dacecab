"""conf/experiment presets compose and instantiate; scripts/prepare_data.py works. (Every task in
conf/data/ is built and checked by test_data_contract.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import hydra
import pytest
from helpers.paths import REPO_ROOT as REPO
from helpers.training import compose_config

from linarena.data import (
    ImageDataModule,
    ListOpsDataModule,
    MQARDataModule,
    PathfinderDataModule,
    RetrievalDataModule,
    TextDataModule,
)


@pytest.mark.parametrize(
    ("experiment", "data_target", "expected"),
    [
        (
            "lra/listops",
            ListOpsDataModule,
            {
                "model.num_layers": 4,
                "model.d_model": 512,
                "optim.warmup_steps": 1000,
                "trainer.max_steps": 5000,
            },
        ),
        (
            "lra/text",
            TextDataModule,
            {"model.d_model": 256, "optim.warmup_steps": 8000, "trainer.max_steps": 20000},
        ),
        (
            "lra/retrieval",
            RetrievalDataModule,
            {"model.d_model": 128, "model.mlp_dim": 512, "trainer.max_steps": 5000},
        ),
        (
            "lra/image",
            ImageDataModule,
            {
                "model.positions": "learned",
                "model.dropout": 0.3,
                "data.batch_size": 256,
                "optim.schedule": "cosine",
            },
        ),
        (
            "lra/pathfinder",
            PathfinderDataModule,
            {"model.pooling": "mean", "data.batch_size": 512, "trainer.max_steps": 62400},
        ),
        (
            "lra/pathx",
            PathfinderDataModule,
            {"data.resolution": 128, "model.max_length": 16384, "model.positions": "learned"},
        ),
        (
            "mqar",
            MQARDataModule,
            # model.causal null: causal because the task says so (TaskSpec.causal).
            {"model.causal": None, "model.pooling": "mean", "model.d_model": 64},
        ),
    ],
)
def test_experiment_presets(tmp_path, experiment, data_target, expected):
    cfg = compose_config([f"experiment={experiment}", f"paths.data_dir={tmp_path}"])
    datamodule = hydra.utils.instantiate(cfg.data)
    assert isinstance(datamodule, data_target)
    assert datamodule.causal == (experiment == "mqar")
    for key, value in expected.items():
        group, name = key.split(".")
        assert cfg[group][name] == value, key
    assert list(cfg.optim.betas) == [0.9, 0.98]


def run_prepare(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LINARENA_ROOT": str(REPO)}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "prepare_data.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_prepare_data_script_builds_and_reports_missing_data(tmp_path):
    done = run_prepare(
        "data=listops_small",
        f"paths.data_dir={tmp_path}",
        "data.num_train=32",
        "data.num_val=8",
        "data.num_test=8",
        "data.generator_workers=1",
        f"hydra.run.dir={tmp_path / 'log'}",
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "cache").glob("listops-*.pt"))) == 1
    assert "data=listops_small ready" in done.stdout + done.stderr  # the name it was given
    failed = run_prepare(
        "data=retrieval", f"paths.data_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'log2'}"
    )
    assert failed.returncode == 1
    assert "new_aan_pairs.train.tsv" in failed.stderr and "Traceback" not in failed.stderr

