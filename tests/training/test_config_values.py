"""Values that passed the checks at 5f661cc and crashed later with a traceback (or a message
about another problem), and a shortened run that needed a second setting nobody mentions."""

from __future__ import annotations

import pytest
from helpers.training import compose_config

from linarena.training import ConfigError
from linarena.training.config_checks import check_config, fit_validation_interval


def check(overrides: list[str]) -> None:
    check_config(compose_config(overrides))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.val_check_interval=0", r"trainer\.val_check_interval=0: use a number"),
        ("trainer.val_check_interval=-3", r"trainer\.val_check_interval=-3"),
        ("trainer.val_check_interval=1.5", r"fraction of an epoch in \(0, 1\]"),
        ("seed=-1", r"seed=-1: the seed must be a whole number from 0"),
        ("seed=4294967296", r"seed=4294967296"),
        ("trainer.max_steps=abc", r"trainer\.max_steps='abc': it must be a whole number"),
        ("data.max_length=2.5", r"data\.max_length=2\.5: it must be a whole number"),
        ("model.compile=inductr", r"model\.compile='inductr': not a torch\.compile backend"),
    ],
)
def test_bad_values_are_refused_by_the_checks(override: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        check([override])


def test_good_values_pass() -> None:
    check(["trainer.val_check_interval=0.5", "seed=0", "seed=4294967295"])
    check(["model.compile=inductor"])


def test_a_shorter_run_validates_at_its_end_unless_the_interval_was_set() -> None:
    cfg = compose_config(["trainer.max_steps=20"])
    assert fit_validation_interval(cfg, ["trainer.max_steps=20"]) == 100
    assert cfg.trainer.val_check_interval == 20
    check_config(cfg)  # no longer "smaller than trainer.val_check_interval=100"

    chosen = compose_config(["trainer.max_steps=20", "trainer.val_check_interval=50"])
    given = ["trainer.max_steps=20", "trainer.val_check_interval=50"]
    assert fit_validation_interval(chosen, given) is None
    with pytest.raises(ConfigError, match=r"val_check_interval to at most 20"):
        check_config(chosen)

    longer = compose_config(["trainer.max_steps=2000"])
    assert fit_validation_interval(longer, ["trainer.max_steps=2000"]) is None
    assert longer.trainer.val_check_interval == 100


@pytest.mark.parametrize(
    "override",
    # One value refused by the checks, one checkpoint refused on resume (its folder is new).
    ["trainer.val_check_interval=0", "ckpt_path=/nonexistent.ckpt"],
)
def test_a_refused_run_leaves_no_folder(tmp_path, override: str) -> None:
    from helpers.training import run_train

    run = tmp_path / "run"
    result = run_train(["debug=smoke", override, f"hydra.run.dir={run}"], tmp_path,
                       tmp_path / "data")
    assert result.returncode == 1
    assert "Error: " in result.stderr and "Traceback" not in result.stderr
    assert not run.exists(), sorted(p.name for p in run.iterdir())


def test_a_task_declares_causal_attention_once() -> None:
    """model.causal null is the task's own (TaskSpec.causal): MQAR trains causally without an
    experiment saying so; an explicit setting still wins."""
    from helpers.training import build_model

    def causal(model) -> bool:
        return model.blocks[0].attention.core.causal

    cfg, _, model = build_model(["data=mqar", "logger=none"])
    assert cfg.model.causal is True and causal(model)
    cfg, _, model = build_model(["logger=none"])
    assert cfg.model.causal is False and not causal(model)
    _, _, model = build_model(["data=mqar", "model.causal=false", "logger=none"])
    assert not causal(model)
