"""Failures a user causes or meets end in one line, not a traceback: the one error root, the
machine's own errors (full disk, read-only folder, no GPU, no Slurm, not enough memory),
checkpoints checked when read, and what a resume may change."""

from __future__ import annotations

import errno
import logging
import math
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers.training import compose_config, compose_with_hydra
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from linarena.data.errors import DataNotFoundError
from linarena.errors import (
    CheckpointError,
    ConfigError,
    LinarenaError,
    NonFiniteStateError,
    ResourceError,
    ResumeError,
)
from linarena.launch_check import launcher_problem
from linarena.models.positions import POSITIONS, Positions
from linarena.training import ClassificationModule, entry
from linarena.training.checkpoint_identity import IDENTITY_KEY
from linarena.training.checkpoint_io import AtomicCheckpointIO
from linarena.training.config_checks import check_config
from linarena.training.launch import check_accelerator
from linarena.training.memory import check_memory
from linarena.training.optim import OptimSettings
from linarena.training.resume import (
    check_resume_changes,
    load_initial_weights,
    restore_run_config,
)

SMOKE = ["debug=smoke", "logger=none"]


def run_job_message(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
                    error: BaseException, *overrides: str) -> str:
    """run_job on a config whose training raises `error`; the message it prints (exit 1)."""
    def fail(cfg):
        raise error

    monkeypatch.setattr(entry, "train", fail)
    cfg = compose_config([*SMOKE, *overrides], output_dir=tmp_path / "run")
    with pytest.raises(SystemExit) as exit_info:
        entry.run_job(cfg)
    assert exit_info.value.code == 1
    message = capsys.readouterr().err.strip()
    assert "Traceback" not in message
    return message


def test_every_user_error_derives_from_the_one_root() -> None:
    from linarena.data.errors import DataConfigError, DataFormatError
    from linarena.models import SequenceTooLongError
    from linarena.training.signals import RunStopped

    for error in (DataNotFoundError, DataFormatError, DataConfigError, SequenceTooLongError,
                  RunStopped, ConfigError, CheckpointError, ResumeError, ResourceError,
                  NonFiniteStateError):
        assert issubclass(error, LinarenaError), error
    # Callers that catch the builtins keep working.
    assert issubclass(DataNotFoundError, FileNotFoundError)
    assert issubclass(SequenceTooLongError, ValueError)


def test_a_word_for_the_learning_rate_or_the_seed_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"seed='abc': the seed must be a whole number"):
        check_config(compose_config([*SMOKE, "seed=abc"]))
    with pytest.raises(Exception, match=r"optim\.lr must be a number, got 'fast'"):
        instantiate(compose_config([*SMOKE, "optim.lr=fast"]).optim)


def test_the_divergence_advice_does_not_read_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The handler used to call float(cfg.optim.lr) and crash on a config like this one.
    message = run_job_message(tmp_path, capsys, monkeypatch,
                              NonFiniteStateError("Training diverged.", lr=None), "optim.lr=fast")
    assert "No checkpoint had been saved yet" in message and "a lower optim.lr" in message
    message = run_job_message(tmp_path, capsys, monkeypatch,
                              NonFiniteStateError("Training diverged.", lr=0.002))
    assert "optim.lr=0.0002" in message


@pytest.mark.parametrize(("code", "expected"), [
    (errno.EROFS, "read-only file system"),
    (errno.ENOSPC, "No space left"),
])
def test_a_read_only_or_full_disk_is_one_line_naming_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
    code: int, expected: str
) -> None:
    target = tmp_path / "data" / "listops" / "train.tsv"
    error = OSError(code, "simulated", str(target))
    message = run_job_message(tmp_path, capsys, monkeypatch, error)
    assert expected in message and str(target.parent) in message and "\n" not in message


def test_a_checkpoint_on_a_full_disk_says_how_much_space_it_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(obj, path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    checkpoint = {"state_dict": {"w": torch.zeros(250_000)}}  # 1 MB
    with pytest.raises(ResourceError) as error:
        AtomicCheckpointIO().save_checkpoint(checkpoint, tmp_path / "ckpts" / "last.ckpt")
    message = str(error.value)
    assert "about 1.0 MB was needed" in message and f"free in {tmp_path / 'ckpts'}" in message
    assert not list((tmp_path / "ckpts").iterdir())  # no temporary file left


def test_an_empty_wandb_mode_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "")
    entry.normalise_environment()
    assert "WANDB_MODE" not in os.environ  # wandb rejects "" with a pydantic traceback


def test_an_offline_wandb_run_prints_no_advertisement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    from linarena.training.wandb_run import wandb_logger

    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_home"))
    logger = wandb_logger(save_dir=str(tmp_path), mode="offline", project="p")
    try:
        logger.experiment.log({"x": 1})
    finally:
        import wandb

        wandb.finish()
    assert "wandb leet" not in capfd.readouterr().err


def test_a_new_run_that_failed_before_training_leaves_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("{}\n")
    (run / "train.log").write_text("")
    message = run_job_message(tmp_path, capsys, monkeypatch, DataNotFoundError("Data not found."))
    assert message == "Error: Data not found." and not run.exists()
    # A folder with anything else in it (here a user's file) is kept.
    (run / ".hydra").mkdir(parents=True)
    (run / "notes.txt").write_text("mine\n")
    run_job_message(tmp_path, capsys, monkeypatch, DataNotFoundError("Data not found."))
    assert (run / "notes.txt").is_file()


def test_a_length_the_machine_cannot_hold_is_refused_with_the_figure() -> None:
    huge = compose_config([*SMOKE, "data.max_length=100000000"])
    with pytest.raises(ResourceError, match=r"needs at least \d+\.\d GB \(position table "
                                            r"25\.6 GB.*is 64\.0 GB"):
        check_memory(huge, "cpu", available=(64 * 10**9, "this machine's RAM"))
    # A run that fits passes on this machine, and so do the LRA presets on a 16 GB device
    # where no attention matrix is materialised (linear attention).
    check_memory(compose_config(SMOKE), "cpu")
    for task in ("text", "retrieval", "image", "pathfinder", "listops"):
        check_memory(compose_config([f"experiment=lra/{task}", "attention=elu"]), "cpu",
                     available=(16 * 10**9, "a 16 GB device"))


def test_the_position_table_counts_what_each_kind_of_positions_says_it_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new kind of positions is one class: the memory check asks it, no list to edit."""
    table = (4096 + 1) * 32 * 4  # (length + CLS) x the smoke model's d_model x float32

    class TwoTables(Positions):
        table_copies = 2

    monkeypatch.setitem(POSITIONS, "two_tables", TwoTables)
    for kind, copies in (("two_tables", 2), ("learned", 4), ("rope", 0), ("none", 0)):
        cfg = compose_config([*SMOKE, "data.max_length=4096"])
        cfg.model.positions = kind
        assert check_memory(cfg, "cpu").position_table == copies * table, kind


def test_init_weights_copies_a_checkpoints_weights_and_refuses_another_model(
    tmp_path: Path,
) -> None:
    """init_weights (a constant-lr tail starts from a finished run's weights); the whole path
    through train.py: tests/training/test_train_resume.py (slow)."""
    torch.manual_seed(0)
    source, fresh = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": source.state_dict(), "global_step": 5, "loops": {}}, path)
    load_initial_weights(path, fresh, {})
    assert torch.equal(fresh.weight, source.weight) and torch.equal(fresh.bias, source.bias)
    with pytest.raises(CheckpointError, match=r"holds a different model .* weight is \[2, 3\] "
                                              r"there, \[4, 3\] here"):
        load_initial_weights(path, torch.nn.Linear(3, 4), {})
    with pytest.raises(ConfigError, match="no such file"):
        load_initial_weights(tmp_path / "none.ckpt", fresh, {})
    with pytest.raises(ConfigError, match="Set one of them"):
        check_config(compose_config([*SMOKE, f"init_weights={path}", f"ckpt_path={path}"]))


def test_init_weights_refuses_another_runs_model_and_names_itself(tmp_path: Path) -> None:
    """init_weights took a softmax checkpoint for an elu model (same shapes), and its errors
    were labelled ckpt_path and suggested ckpt_path=."""
    elu = {"task_name": "listops_small", "attention_name": "elu", "attention.backend": "auto",
           "model.d_model": 32, "model.dropout": 0.1, "data.num_train": 64, "optim.lr": 1e-3,
           "seed": 1, "trainer.max_steps": 4, "code_version": "a"}
    path = tmp_path / "softmax.ckpt"
    weights = {"w": torch.ones(3)}
    torch.save({"state_dict": weights, "global_step": 4, "loops": {},
                IDENTITY_KEY: {**elu, "attention_name": "softmax"}}, path)
    module = nn.ParameterDict({"w": nn.Parameter(torch.zeros(3))})
    with pytest.raises(CheckpointError, match=r"^init_weights: .* \(attention_name: 'softmax' "
                                              r"there, 'elu' here\)"):
        load_initial_weights(path, module, elu)
    # The training settings, the data's size and dropout are the new run's own.
    tail = {**elu, "model.dropout": 0.0, "data.num_train": 128, "optim.lr": 1e-4, "seed": 2,
            "trainer.max_steps": 2000, "code_version": "b"}
    torch.save({"state_dict": weights, "global_step": 4, "loops": {}, IDENTITY_KEY: elu}, path)
    load_initial_weights(path, module, tail)
    assert torch.equal(module["w"], weights["w"])

    (tmp_path / "corrupt.ckpt").write_bytes(b"not a checkpoint")
    diverged = write_checkpoint(tmp_path / "nan.ckpt", math.nan)
    for bad in (tmp_path / "corrupt.ckpt", diverged):
        with pytest.raises(CheckpointError, match=r"^init_weights: .*init_weights=") as refused:
            load_initial_weights(bad, module, elu)
        assert "ckpt_path" not in str(refused.value)


def test_softmax_attention_matrices_count_only_where_pytorch_materialises_them() -> None:
    plain = check_memory(compose_config([*SMOKE, "data.max_length=4096"]), "cpu")
    assert plain.attention_matrices == 0  # flash kernel: no length x length matrix
    dropout = check_memory(compose_config([*SMOKE, "data.max_length=4096",
                                           "attention_dropout=0.1"]), "cpu")
    assert dropout.attention_matrices == 1 * 4 * 2 * 4096**2 * 4  # layers x batch x heads x N^2


def test_a_gpu_accelerator_without_a_gpu_suggests_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    trainer = compose_config(["trainer=ddp", "trainer.devices=4"]).trainer
    with pytest.raises(ConfigError, match=r"Add trainer\.accelerator=cpu"):
        check_accelerator(trainer)
    check_accelerator(OmegaConf.merge(trainer, {"accelerator": "cpu"}))


def test_slurm_off_a_cluster_is_one_line_suggesting_submitit_local(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    cfg = compose_with_hydra(["hydra/launcher=slurm"])
    callback = instantiate(cfg.hydra.callbacks.check_launcher)
    with pytest.raises(SystemExit) as exit_info:
        callback.on_multirun_start(config=cfg)
    assert exit_info.value.code == 1
    assert "hydra/launcher=submitit_local" in capsys.readouterr().err
    assert launcher_problem(compose_with_hydra([]).hydra.launcher.get("_target_")) is None


def write_checkpoint(path: Path, weight: float, exp_avg_sq: float = 1.0) -> Path:
    torch.save({
        "state_dict": {"model.w": torch.full((3,), weight),
                       "val_acc_best.max_value": torch.tensor(-math.inf)},
        "optimizer_states": [{"state": {0: {"exp_avg_sq": torch.full((3,), exp_avg_sq)}}}],
        "global_step": 7, "loops": {},
    }, path)
    return path


def test_a_checkpoint_holding_nan_is_refused_when_read(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    clean = write_checkpoint(tmp_path / "checkpoints" / "clean.ckpt", 1.0)
    _, resume = restore_run_config(OmegaConf.create({"ckpt_path": str(clean)}), tmp_path)
    assert resume.step == 7  # a metric's -inf is not a weight
    for weight, state in ((math.nan, 1.0), (1.0, math.inf)):
        bad = write_checkpoint(tmp_path / "checkpoints" / "last.ckpt", weight, state)
        with pytest.raises(CheckpointError, match=r"holds non-finite values .* step 7"):
            restore_run_config(OmegaConf.create({"ckpt_path": str(bad)}), tmp_path)


def test_last_clean_is_said_only_of_a_checked_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    write_checkpoint(tmp_path / "checkpoints" / "last.ckpt", math.nan)
    message = entry.explain(NonFiniteStateError("Diverged.", lr=0.01), tmp_path)
    assert "last clean" not in message and "is not clean" in message
    write_checkpoint(tmp_path / "checkpoints" / "last.ckpt", 1.0)
    message = entry.explain(NonFiniteStateError("Diverged.", lr=0.01), tmp_path)
    assert "The last clean checkpoint" in message and "optim.lr=0.001" in message


def test_a_resume_may_change_how_often_it_validates_but_not_the_model(tmp_path: Path) -> None:
    check_resume_changes({"trainer.max_steps": (600, 12),
                          "trainer.val_check_interval": (100, 12)}, tmp_path)
    with pytest.raises(ResumeError, match=r"model\.d_model: 32 -> 64"):
        check_resume_changes({"model.d_model": (32, 64)}, tmp_path)


def test_the_model_summary_has_no_all_zero_flops_column(caplog: pytest.LogCaptureFixture) -> None:
    from lightning.pytorch.utilities.model_summary import summarize

    from linarena.training.progress import CompactModelSummary

    module = ClassificationModule(nn.Linear(4, 3), OptimSettings(), 3, "sequence")
    summary = summarize(module)
    with caplog.at_level(logging.INFO):
        CompactModelSummary.summarize(summary._get_summary_data(), summary.total_parameters,
                                      summary.trainable_parameters, summary.model_size,
                                      summary.total_training_modes, total_flops=0)
    assert "| Params" in caplog.text and "| FLOPs" not in caplog.text
