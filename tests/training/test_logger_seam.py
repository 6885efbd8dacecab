"""A logger is one YAML file in conf/logger/: what it writes when built is declared there
(`_files_`, so that a run failing before training leaves no folder whatever its logger), and an
optional package it needs (`_requires_`) makes its tests skip with that reason, not fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.training import compose_config, config_names, skip_without_logger_packages
from hydra.core.hydra_config import HydraConfig

from linarena.training.build import LOGGER_FILES, build_loggers, logger_nodes


@pytest.mark.parametrize("logger", config_names("logger"))
def test_a_logger_writes_only_what_its_yaml_declares(
    logger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    skip_without_logger_packages(logger)
    run = tmp_path / "run"
    cfg = compose_config(["debug=smoke", f"logger={logger}"], output_dir=run)
    try:
        nodes = logger_nodes(cfg)
        run.mkdir()
        for built in build_loggers(cfg):
            built.log_hyperparams({"x": 1})
            built.finalize("success")
        import wandb

        wandb.finish()
        declared = {str(name) for node in nodes.values() for name in node.get(LOGGER_FILES) or ()}
        written = {path.name for path in run.iterdir()}
        assert written <= declared, f"logger={logger} writes {written - declared} undeclared"
    finally:
        HydraConfig.instance().cfg = None


def test_a_missing_optional_package_is_one_line(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from linarena.errors import ConfigError

    cfg = OmegaConf.create({"logger": {"tb": {"_target_": "x.Y", "_requires_": "no_such_pkg"}}})
    with pytest.raises(ConfigError, match=r"logger=tb needs the package no_such_pkg: pip install"):
        build_loggers(cfg)
