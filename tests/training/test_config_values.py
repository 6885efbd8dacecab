"""Values that passed the checks at 5f661cc and crashed later with a traceback (or a message
about another problem), and a shortened run that needed a second setting nobody mentions."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.training import compose_config
from hydra.utils import instantiate

from linarena.training import ConfigError
from linarena.training.config_checks import check_config, fit_validation_interval


def check(overrides: list[str]) -> None:
    check_config(compose_config(overrides))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.val_check_interval=0", r"trainer\.val_check_interval=0: use a number"),
        ("trainer.val_check_interval=-3", r"trainer\.val_check_interval=-3"),
        ("trainer.val_check_interval=1.5", r"a fraction of an epoch in \(0, 1\]"),
        ("seed=-1", r"seed=-1: the seed must be a whole number from 0"),
        ("seed=4294967296", r"seed=4294967296"),
        ("trainer.max_steps=abc", r"trainer\.max_steps='abc': it must be a whole number"),
        ("data.max_length=2.5", r"data\.max_length=2\.5: it must be a whole number"),
        ("model.compile=inductr", r"model\.compile='inductr': not a torch\.compile backend"),
        # A model without attention (num_layers=0) trained and was filed under its attention.
        ("model.num_layers=0", r"model\.num_layers=0: it must be a whole number >= 1"),
        ("model.num_heads=0", r"model\.num_heads=0: it must be a whole number >= 1"),
        ("model.d_model=0", r"model\.d_model=0: it must be a whole number >= 1"),
        ("model.mlp_dim=-4", r"model\.mlp_dim=-4: it must be a whole number >= 1"),
        ("model.qkv_dim=0", r"model\.qkv_dim=0: it must be a whole number >= 1"),
        ("trainer.accumulate_grad_batches=0",
         r"trainer\.accumulate_grad_batches=0: it must be a whole number >= 1"),
        # Lightning takes a fraction of an epoch only with validation per epoch.
        ("trainer.val_check_interval=0.5", r"check_val_every_n_epoch=1"),
    ],
)
def test_bad_values_are_refused_by_the_checks(override: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        check([override])


def test_good_values_pass() -> None:
    check(["trainer.val_check_interval=0.5", "trainer.check_val_every_n_epoch=1", "seed=0",
           "seed=4294967295"])
    check(["model.compile=inductor"])


def test_the_validation_interval_hint_suggests_settings_that_train(tmp_path: Path) -> None:
    """Each setting the refusal suggests passes the checks and Lightning's own (a fraction of an
    epoch alone fails in Lightning under the default trainer.check_val_every_n_epoch=null)."""
    with pytest.raises(ConfigError) as refused:
        check(["trainer.val_check_interval=1.5"])
    message = str(refused.value)
    suggested = [["trainer.val_check_interval=100"], ["trainer.val_check_interval=null"],
                 ["trainer.val_check_interval=0.5", "trainer.check_val_every_n_epoch=1"]]
    for settings in suggested:
        assert " ".join(settings) in message, (settings, message)
        cfg = compose_config(["logger=none", *settings], output_dir=tmp_path)
        check_config(cfg)
        instantiate(cfg.trainer, logger=False, callbacks=[], enable_checkpointing=False,
                    precision="32-true")


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
    ["trainer.val_check_interval=0", "ckpt_path=/nonexistent.ckpt", "+atention=elu"],
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
