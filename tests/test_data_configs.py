"""conf/data and conf/experiment compose and instantiate; scripts/prepare_data.py works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import hydra
import pytest
from training_helpers import compose_config

from linarena.data import (
    ImageDataModule,
    ListOpsDataModule,
    MQARDataModule,
    PathfinderDataModule,
    RetrievalDataModule,
    TextDataModule,
)

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"

DATA_CONFIGS = {
    "listops": (ListOpsDataModule, "listops", 2000, "sequence"),
    "listops_small": (ListOpsDataModule, "listops", 128, "sequence"),
    "text": (TextDataModule, "text", 4096, "sequence"),
    "retrieval": (RetrievalDataModule, "retrieval", 4000, "pair"),
    "image": (ImageDataModule, "image", 1024, "sequence"),
    "pathfinder": (PathfinderDataModule, "pathfinder32", 1024, "sequence"),
    "pathx": (PathfinderDataModule, "pathx", 16384, "sequence"),
    "mqar": (MQARDataModule, "mqar", 256, "token"),
}

# The overrides the report gives for debug=smoke, per generated task.
SMOKE_OVERRIDES = {
    "listops": [
        "data.source=generated",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.min_length=10",
        "data.max_length=64",
        "data.generator_workers=1",
    ],
    "pathfinder": [
        "data.source=generated",
        "data.num_train=64",
        "data.num_val=16",
        "data.num_test=16",
        "data.generator_workers=1",
    ],
    "mqar": ["data.num_train=64", "data.num_val=16", "data.num_test=16"],
}


@pytest.mark.parametrize("name", sorted(DATA_CONFIGS))
def test_data_config_instantiates(tmp_path, name):
    cls, task_name, max_length, task = DATA_CONFIGS[name]
    cfg = compose_config([f"data={name}", f"paths.data_dir={tmp_path}"])
    assert cfg.data.data_dir == str(tmp_path) and cfg.model.max_length == max_length
    datamodule = hydra.utils.instantiate(cfg.data)
    assert isinstance(datamodule, cls)
    assert (datamodule.name, datamodule.max_length, datamodule.head_kind) == (
        task_name,
        max_length,
        task,
    )
    assert datamodule.vocab_size > 1 and datamodule.num_classes > 1
    assert not any(tmp_path.iterdir())  # nothing is read or written before prepare_data


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
            {"model.causal": True, "model.pooling": "mean", "model.d_model": 64},
        ),
    ],
)
def test_experiment_presets(tmp_path, experiment, data_target, expected):
    cfg = compose_config([f"experiment={experiment}", f"paths.data_dir={tmp_path}"])
    assert isinstance(hydra.utils.instantiate(cfg.data), data_target)
    for key, value in expected.items():
        group, name = key.split(".")
        assert cfg[group][name] == value, key
    assert list(cfg.optim.betas) == [0.9, 0.98]


@pytest.mark.parametrize("name", sorted(SMOKE_OVERRIDES))
def test_smoke_overrides_build_tiny_data(tmp_path, name):
    cfg = compose_config([f"data={name}", f"paths.data_dir={tmp_path}", *SMOKE_OVERRIDES[name]])
    datamodule = hydra.utils.instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup()
    assert {s: len(d) for s, d in datamodule.datasets.items()} == {
        "train": 64,
        "val": 16,
        "test": 16,
    }


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
        "data=mqar",
        f"paths.data_dir={tmp_path}",
        "data.num_train=32",
        "data.num_val=8",
        "data.num_test=8",
        f"hydra.run.dir={tmp_path / 'log'}",
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "cache").glob("mqar-*.pt"))) == 1
    failed = run_prepare(
        "data=retrieval", f"paths.data_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'log2'}"
    )
    assert failed.returncode == 1
    assert "new_aan_pairs.train.tsv" in failed.stderr and "Traceback" not in failed.stderr
