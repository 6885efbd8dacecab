"""Run and job folders are named by what ran: the attention, its positions when they are not the
default, a hybrid stack's pattern (conf/hydra/default.yaml, linarena.run_folder_names)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.training import compose_with_hydra
from omegaconf import OmegaConf

from linarena.run_folder_names import DEFAULT_POSITIONS, RESOLVER, run_folder_name


@pytest.fixture(autouse=True)
def resolver() -> None:
    """The resolver as train.py registers it."""
    OmegaConf.register_new_resolver(RESOLVER, run_folder_name, replace=True)


def folders(overrides: list[str]) -> tuple[str, str]:
    """(the single run's folder name, a multirun job's) for these train.py overrides."""
    cfg = compose_with_hydra(overrides)
    cfg.hydra.job.num = 3
    return Path(cfg.hydra.run.dir).name, cfg.hydra.sweep.subdir


def test_a_plain_run_keeps_its_name() -> None:
    run, job = folders(["attention=elu", "seed=2"])
    assert run.endswith("_listops_small_elu") and job == "3_elu_s2"


def test_positions_other_than_the_default_are_named() -> None:
    run, job = folders(["model.positions=rope"])
    assert run.endswith("_listops_small_softmax_rope") and job == "3_softmax_rope_s1"
    assert folders(["model.positions=alibi", "attention=swa"])[1] == "3_swa_alibi_s1"


def test_a_hybrid_is_named_by_its_pattern_not_the_unused_attention() -> None:
    run, job = folders(["experiment=hybrid/gated_deltanet_softmax"])
    assert run.endswith("_listops_small_pattern-gated_deltanet-x2+softmax")
    assert job == "3_pattern-gated_deltanet-x2+softmax_s1"
    # An entry with its own settings is named by its variant; with positions, both.
    _, job = folders(["experiment=hybrid/gated_deltanet_swa", "model.positions=learned",
                      "model.pattern=[gated_deltanet,{swa:{window:16}}]"])
    assert job == "3_pattern-gated_deltanet+swa_learned_s1"


def test_the_default_positions_are_the_model_configs() -> None:
    assert compose_with_hydra([]).model.positions == DEFAULT_POSITIONS


def test_names_are_safe_in_a_shell_and_on_any_file_system() -> None:
    assert run_folder_name("softmax", "sinusoidal", None) == "softmax"
    name = run_folder_name("softmax", "my kind/2", ["a/b", "c d"])
    assert name == "pattern-a-b+c-d_my-kind-2"
