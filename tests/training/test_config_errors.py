"""Bad input gets one message that says what is wrong and what to change, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.training import build_model, compose_config, run_train
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from linarena.attention.variants import variant_names
from linarena.training import ConfigError
from linarena.training.config_checks import check_config
from linarena.training.launch import check_ddp_launch, check_launch, resolve_precision
from linarena.training.resume import checkpoint_path

BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
SUBMITIT = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def check(overrides: list[str]) -> None:
    check_config(compose_config(overrides))


def test_misspelt_key_added_by_an_override_or_experiment_is_caught() -> None:
    with pytest.raises(ConfigError, match=r"model\.dmodel \(did you mean d_model\?\)"):
        check(["+model.dmodel=64"])
    with pytest.raises(ConfigError,
                       match=r"attention\.num_feature \(did you mean num_features\?\)"):
        check(["attention=performer", "+attention.num_feature=64"])
    with pytest.raises(ConfigError, match=r"trainer\.max_step\b"):
        check(["+trainer.max_step=3"])


def test_a_top_level_key_added_by_a_plus_is_refused_with_the_closest_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`+atention=elu` (a typo, with the + that Hydra's hint for an unknown key suggests) would
    train softmax and file it as softmax."""
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # the overrides are this test's

    def check_as_train_py(overrides: list[str]) -> None:
        check_config(compose_config(overrides, output_dir=tmp_path / "run"))

    with pytest.raises(ConfigError, match=r"\+atention=elu: .*did you mean attention=elu\?"):
        check_as_train_py(["+atention=elu"])
    with pytest.raises(ConfigError, match=r"\+modle\.d_model=64: .*did you mean model\.d_model="):
        check_as_train_py(["+modle.d_model=64"])
    # The + uses the project relies on: a key below an existing node (tests, README, scripts).
    check_as_train_py(["+callbacks.poison._target_=helpers.training.PoisonWeights",
                       "+callbacks.poison.at_step=3", "+trainer.max_time=00:00:00:25"])
    check_as_train_py(["attention=taylor", "+attention.output_norm=rms"])
    check_as_train_py(["experiment=mqar_study_cpu", "+study.entries.elu2=[]"])


def test_d_model_not_divisible_by_heads() -> None:
    with pytest.raises(ConfigError,
                       match=r"model\.d_model=100 must be divisible by model\.num_heads=8"):
        build_model(["model.d_model=100", "model.num_heads=8"])
    with pytest.raises(ConfigError,
                       match=r"model\.qkv_dim=20 must be divisible by model\.num_heads=8"):
        build_model(["model.qkv_dim=20", "model.num_heads=8"])


def test_causal_cosformer_without_max_length() -> None:
    with pytest.raises(ConfigError, match=r"attention\.max_length"):
        check(["attention=cosformer", "attention.max_length=null", "model.causal=true",
               "model.pooling=mean"])
    check(["attention=cosformer", "model.causal=true", "model.pooling=mean"])  # the default is fine


def test_causal_with_cls_pooling() -> None:
    with pytest.raises(ConfigError, match=r"model\.pooling=mean"):
        build_model(["model.causal=true", "model.pooling=cls"])
    build_model(["data=mqar", "model.causal=true", "model.pooling=cls"])  # per-token head: fine


def test_sequences_longer_than_the_model_accepts() -> None:
    with pytest.raises(ConfigError, match=r"data\.max_length=.* longer than model\.max_length=10"):
        check(["model.max_length=10"])


def test_ddp_under_multirun_with_the_basic_launcher_is_refused() -> None:
    ddp = OmegaConf.create({"strategy": "ddp", "devices": 2, "accelerator": "gpu", "num_nodes": 1})
    with pytest.raises(ConfigError, match=r"hydra/launcher=slurm.*ddp_spawn"):
        check_ddp_launch(ddp, multirun=True, launcher_target=BASIC)
    check_ddp_launch(ddp, multirun=False, launcher_target=BASIC)
    check_ddp_launch(ddp, multirun=True, launcher_target=SUBMITIT)
    spawn = OmegaConf.merge(ddp, {"strategy": "ddp_spawn"})
    check_ddp_launch(spawn, multirun=True, launcher_target=BASIC)
    single = OmegaConf.merge(ddp, {"devices": 1})
    check_ddp_launch(single, multirun=True, launcher_target=BASIC)


def test_a_run_without_validation_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"val_check_interval to at most 50"):
        check(["trainer.max_steps=50", "trainer.val_check_interval=100"])
    with pytest.raises(ConfigError, match=r"limit_val_batches=0"):
        check(["trainer.limit_val_batches=0"])


def test_precision_auto_is_full_precision_on_cpu() -> None:
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("16-mixed", "gpu") == "16-mixed"


def test_fp16_mixed_precision_on_the_cpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning runs 16-mixed on the CPU as bf16-mixed: the run would record a precision it did
    not train with."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    for accelerator in ("cpu", "auto"):
        trainer = compose_config([f"trainer.accelerator={accelerator}",
                                  "trainer.precision=16-mixed"]).trainer
        with pytest.raises(ConfigError, match=r"trainer\.precision=16-mixed needs a GPU.*"
                                              r"trainer\.precision=bf16-mixed"):
            check_launch(trainer)
    cpu = compose_config(["trainer.accelerator=cpu", "trainer.precision=bf16-mixed"]).trainer
    assert check_launch(cpu) == "bf16-mixed"


def test_resume_without_a_checkpoint_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"checkpoints/last\.ckpt.*hydra\.run\.dir"):
        checkpoint_path("last", tmp_path)


def test_command_line_errors_are_one_clear_message(tmp_path: Path) -> None:
    unknown = run_train(["attention=flash"], tmp_path, tmp_path / "data")
    assert unknown.returncode != 0
    assert "Could not find 'attention/flash'" in unknown.stderr
    for choice in variant_names():
        assert choice in unknown.stderr
    assert "Traceback" not in unknown.stderr

    bad_heads = run_train(["model.d_model=30", "model.num_heads=4", "logger=none"], tmp_path,
                          tmp_path / "data")
    assert bad_heads.returncode == 1
    assert "model.d_model=30 must be divisible by model.num_heads=4" in bad_heads.stderr
    assert "Traceback" not in bad_heads.stderr


def test_a_command_line_typo_is_reported_before_lightning_loads() -> None:
    """train.py reads linarena.training.environment before Hydra composes the config: that
    import must not load Lightning (seconds), so a typo fails at once."""
    code = ("import sys, linarena.training.environment, linarena.training.summary; "
            "print(sorted(m for m in ('lightning', 'torchmetrics') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
