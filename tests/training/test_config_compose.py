"""Every shipped config composes, passes the checks and builds its model; launcher, sweeper and
path settings resolve as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.training import CONF, build_model, compose_config, compose_with_hydra, config_names
from hydra.utils import get_class

from linarena.errors import ConfigError

ATTENTIONS = config_names("attention")
DATA = config_names("data")
EXPERIMENTS = config_names("experiment")


def test_the_config_groups_hold_what_the_tests_below_cover() -> None:
    assert {"softmax", "elu", "performer", "cosformer"} <= set(ATTENTIONS)
    assert "listops_small" in DATA and "listops" in DATA
    assert EXPERIMENTS, "no experiment configs found"


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_data_and_attention_config_builds_a_model(data: str, attention: str) -> None:
    cfg, datamodule, model = build_model([f"data={data}", f"attention={attention}"])
    assert model.max_length >= datamodule.max_length
    assert len(model.blocks) == cfg.model.num_layers


@pytest.mark.parametrize("experiment", EXPERIMENTS)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_experiment_config_builds_a_model(experiment: str, attention: str) -> None:
    overrides = [f"experiment={experiment}", f"attention={attention}"]
    cfg = compose_config(overrides)
    if cfg.model.short_conv and getattr(get_class(cfg.attention._target_), "own_short_conv", False):
        # A layer with its own convolutions under a preset that adds one before every block
        # (the MQAR studies' short_conv=3) is refused before training, saying what to set.
        with pytest.raises(ConfigError, match=r"model\.short_conv=0"):
            build_model(overrides)
        return
    cfg, datamodule, model = build_model(overrides)
    assert model.head_kind == datamodule.head_kind
    assert cfg.model.d_model % cfg.model.num_heads == 0


@pytest.mark.parametrize("data", DATA)
def test_debug_smoke_shrinks_every_task_to_valid_settings(data: str) -> None:
    cfg, _, model = build_model([f"data={data}", "debug=smoke"])
    assert cfg.trainer.max_steps <= 10 and cfg.trainer.limit_test_batches <= 2
    assert cfg.data.batch_size <= 8 and len(model.blocks) == 1


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_debug_smoke_applies_on_top_of_every_experiment(experiment: str) -> None:
    cfg, _, _ = build_model([f"experiment={experiment}", "debug=smoke"])
    assert cfg.trainer.max_steps <= 10 and cfg.model.d_model == 32


@pytest.mark.parametrize("debug", config_names("debug"))
def test_every_debug_preset_composes_and_passes_the_checks(debug: str) -> None:
    cfg, _, _ = build_model([f"debug={debug}"])
    assert cfg.trainer.get("fast_dev_run") or cfg.trainer.max_steps > 0


def test_cosformer_max_length_follows_the_model() -> None:
    cfg = compose_config(["attention=cosformer", "model.max_length=300", "data.max_length=300"])
    assert cfg.attention.max_length == 300


def test_slurm_launcher_starts_one_task_per_device() -> None:
    cfg = compose_with_hydra(["hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == 4 and launcher.gpus_per_node == 4 and launcher.nodes == 1
    assert cfg.trainer.strategy == "ddp"


def test_optuna_search_space_and_direction() -> None:
    cfg = compose_with_hydra(["hparams_search=optuna"])
    sweeper = cfg.hydra.sweeper
    assert "optuna" in sweeper._target_.lower() and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"optim.lr", "optim.weight_decay", "model.dropout"}


def test_data_dir_defaults_to_the_repo_and_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LINARENA_ROOT", str(CONF.parent))
    monkeypatch.delenv("LINARENA_DATA_DIR", raising=False)
    assert compose_config([]).paths.data_dir == str(CONF.parent / "data")
    monkeypatch.setenv("LINARENA_DATA_DIR", str(tmp_path))
    assert compose_config([]).paths.data_dir == str(tmp_path)
