"""A sweep whose jobs run in other processes (submitit) says where their output goes."""

from __future__ import annotations

import pytest
from helpers.training import compose_with_hydra

from linarena.training.launch_notice import LaunchNotice


def test_a_submitit_sweep_says_where_its_jobs_write(capsys: pytest.CaptureFixture) -> None:
    cfg = compose_with_hydra(["hydra/launcher=submitit_local", "hydra.sweep.dir=/sweeps/s1"])
    LaunchNotice().on_multirun_start(cfg)
    assert "tail -f /sweeps/s1/.submitit/*/*_0_log.out" in capsys.readouterr().out


def test_the_basic_launcher_prints_nothing_more(capsys: pytest.CaptureFixture) -> None:
    LaunchNotice().on_multirun_start(compose_with_hydra([]))
    assert capsys.readouterr().out == ""


def test_the_notice_is_installed_for_every_run() -> None:
    callbacks = compose_with_hydra([]).hydra.callbacks
    assert any(c._target_.endswith("LaunchNotice") for c in callbacks.values())
