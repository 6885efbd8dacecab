"""Long runs through train.py: resume from the run's own config, divergence advice that works,
SIGTERM/SIGINT, and a kill -9 that changes nothing (tiny generated ListOps, CPU)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from helpers.training import run_train

SMOKE = ["debug=smoke", "logger=csv", "trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def resume_command(stderr: str) -> list[str]:
    """The arguments of the `python train.py ...` command a message tells the user to run."""
    command = re.search(r"python train\.py ([^\n]*?)(?: \(|$)", stderr, re.MULTILINE)
    assert command, stderr[-3000:]
    return shlex.split(command.group(1))


@pytest.mark.slow
def test_resume_uses_the_runs_own_config_and_applies_allowed_changes(
    tmp_path: Path, data_dir: Path
) -> None:
    run = tmp_path / "run"
    first = run_train([*SMOKE, "attention=performer", "optim.lr=0.002", f"hydra.run.dir={run}"],
                      tmp_path, data_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    overrides = (run / ".hydra" / "overrides.yaml").read_text()
    config = (run / ".hydra" / "config.yaml").read_text()

    refused = run_train(["ckpt_path=last", f"hydra.run.dir={run}", "attention=elu",
                         "model.d_model=64"], tmp_path, data_dir)
    assert refused.returncode == 1
    assert "model.d_model: 32 -> 64" in refused.stderr
    assert "attention._target_" in refused.stderr and "Traceback" not in refused.stderr

    done = run_train(["ckpt_path=last", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert done.returncode == 0 and "already finished" in done.stdout
    assert summary(run)["metrics"]["perf/tokens_per_sec"] > 0  # unchanged

    # How often to validate may change too: the advice "set trainer.val_check_interval to at
    # most N" for a short resume can be followed.
    longer = run_train(["ckpt_path=last", f"hydra.run.dir={run}", "trainer.max_steps=8",
                        "optim.lr=0.0005", "trainer.val_check_interval=4"], tmp_path, data_dir)
    assert longer.returncode == 0, longer.stderr[-3000:]
    result = summary(run)
    assert result["attention"] == "performer" and result["global_step"] == 8
    assert result["hparams"]["lr"] == 0.0005
    assert result["resumes"][-1]["changes"]["optim.lr"] == {"before": 0.002, "after": 0.0005}
    assert result["resumes"][-1]["changes"]["trainer.val_check_interval"] == {
        "before": 2, "after": 4}
    history = yaml.safe_load((run / "resume_history.yaml").read_text())
    assert [h["from_step"] for h in history] == [4]
    # The restored optimizer and schedule really use the new lr: rsqrt, warmup 2, at step 8.
    checkpoint = load(run / "checkpoints" / "last.ckpt")
    assert checkpoint["lr_schedulers"][0]["base_lrs"] == [0.0005, 0.0005]
    lr = checkpoint["optimizer_states"][0]["param_groups"][0]["lr"]
    assert lr == pytest.approx(0.0005 * (2 / 9) ** 0.5)
    # The record of how the run started is untouched.
    assert (run / ".hydra" / "overrides.yaml").read_text() == overrides
    assert (run / ".hydra" / "config.yaml").read_text() == config


@pytest.mark.slow
def test_init_weights_starts_a_new_run_from_a_checkpoints_weights_only(
    tmp_path: Path, data_dir: Path
) -> None:
    """A constant-lr tail after a finished run (issue #26: the step-budget check): the new run
    starts from the weights, at step 0, with its own optimizer and schedule."""
    first = tmp_path / "first"
    assert run_train([*SMOKE, f"hydra.run.dir={first}"], tmp_path, data_dir).returncode == 0
    start = first / "checkpoints" / "last.ckpt"
    tail = tmp_path / "tail"
    # lr 1e-30 (AdamW's decay is scaled by the lr too): no float32 weight can move, so the
    # weights must stay those it started from.
    done = run_train([*SMOKE, f"init_weights={start}", "optim.lr=1e-30", "optim.schedule=constant",
                      "trainer.max_steps=2", f"hydra.run.dir={tail}"], tmp_path, data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    before = torch.load(start, weights_only=True)
    after = torch.load(tail / "checkpoints" / "last.ckpt", weights_only=True)
    assert after["global_step"] == 2 and before["global_step"] > 2
    for key, value in before["state_dict"].items():
        assert torch.equal(after["state_dict"][key], value), key
    other = run_train([*SMOKE, f"init_weights={start}", "model.d_model=64",
                       f"hydra.run.dir={tmp_path / 'other'}"], tmp_path, data_dir)
    assert other.returncode == 1 and "holds a different model than this config" in other.stderr
    both = run_train([*SMOKE, f"init_weights={start}", "ckpt_path=last",
                      f"hydra.run.dir={first}"], tmp_path, data_dir)
    assert both.returncode == 1 and "init_weights" in both.stderr


@pytest.mark.slow
def test_divergence_keeps_a_clean_checkpoint_and_its_advice_works(
    tmp_path: Path, data_dir: Path
) -> None:
    run = tmp_path / "run"
    # Above lr 5e-4 AdamW's exp_avg_sq becomes inf from step 3 on (weights stay finite).
    poison = ["+callbacks.poison._target_=helpers.training.PoisonOptimizerAboveLr",
              "+callbacks.poison.max_lr=0.0005", "+callbacks.poison.from_step=3"]
    diverged = run_train([*SMOKE, "attention=elu", "trainer.max_steps=6", *poison,
                          f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert diverged.returncode == 1
    assert "Traceback" not in diverged.stderr
    assert "exp_avg_sq" in diverged.stderr
    last = run / "checkpoints" / "last.ckpt"
    assert f"last clean checkpoint (weights and optimizer state finite) is {last}, step 2" in (
        diverged.stderr)
    checkpoint = load(last)
    assert checkpoint["global_step"] == 2
    for state in checkpoint["optimizer_states"][0]["state"].values():
        assert torch.isfinite(state["exp_avg_sq"]).all()

    advice = resume_command(diverged.stderr)
    assert "optim.lr=0.0001" in advice
    resumed = run_train([*advice, "trainer.enable_progress_bar=false"], tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(run)["global_step"] == 6
    assert "diverged" not in summary(run)  # the resumed run's summary replaces the diverged one


@pytest.mark.slow
@pytest.mark.parametrize(("signal_name", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_saves_a_checkpoint_says_how_to_resume_and_exits_non_zero(
    signal_name: str, code: int, tmp_path: Path, data_dir: Path
) -> None:
    run = tmp_path / "run"
    stop = ["+callbacks.stop._target_=helpers.training.SignalAtStep", "+callbacks.stop.step=3",
            f"+callbacks.stop.signal_name={signal_name}", f"+callbacks.stop.once={tmp_path / 'x'}"]
    stopped = run_train([*SMOKE, "trainer.max_steps=6", *stop, f"hydra.run.dir={run}"],
                        tmp_path, data_dir)
    assert stopped.returncode == code, stopped.stderr[-3000:]
    assert f"Stopped by {signal_name} at step 3" in stopped.stderr
    assert "Error:" not in stopped.stderr  # a stop the user asked for is not an error
    assert "`weights_only` was not set" not in stopped.stdout + stopped.stderr
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 3
    assert not (run / "summary.json").exists()

    resumed = run_train(resume_command(stopped.stderr), tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(run)["global_step"] == 6
    assert "diverged" not in summary(run)  # the resumed run's summary replaces the diverged one


@pytest.mark.slow
def test_a_run_killed_with_sigkill_and_resumed_ends_with_the_same_weights(
    tmp_path: Path, data_dir: Path
) -> None:
    common = [*SMOKE, "trainer.deterministic=true", "trainer.max_steps=8", "model.dropout=0.1"]
    whole = run_train([*common, f"hydra.run.dir={tmp_path / 'whole'}"], tmp_path, data_dir)
    assert whole.returncode == 0, whole.stderr[-3000:]

    run = tmp_path / "killed"
    kill = ["+callbacks.kill._target_=helpers.training.SignalAtStep", "+callbacks.kill.step=5",
            "+callbacks.kill.signal_name=SIGKILL", f"+callbacks.kill.once={tmp_path / 'x'}"]
    killed = run_train([*common, *kill, f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert killed.returncode == -9
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 4  # mid-epoch
    resumed = run_train(["ckpt_path=last", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected = load(tmp_path / "whole" / "checkpoints" / "last.ckpt")["state_dict"]
    actual = load(run / "checkpoints" / "last.ckpt")["state_dict"]
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


# 64 training examples (debug=smoke) in batches of 16: an epoch is 4 steps; validation (and
# last.ckpt) every 2 steps, so steps 4 and 8 end an epoch and step 6 is a validation mid-epoch.
EPOCHS_OF_4 = [*SMOKE, "trainer.deterministic=true", "data.batch_size=16", "trainer.max_steps=10",
               "trainer.val_check_interval=2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    tmp_path = tmp_path_factory.mktemp("uninterrupted")
    done = run_train([*EPOCHS_OF_4, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, data_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / "run"


@pytest.mark.slow
@pytest.mark.parametrize(("signal_name", "step", "saved_at"), [
    ("SIGTERM", 4, 4),  # the end of an epoch
    ("SIGINT", 8, 8),  # the end of an epoch
    ("SIGINT", 6, 6),  # a validation mid-epoch
    ("SIGKILL", 5, 4),  # last.ckpt of the validation that ended the epoch
])
def test_a_run_stopped_at_any_step_and_resumed_ends_as_an_uninterrupted_run(
    signal_name: str, step: int, saved_at: int, uninterrupted: Path, tmp_path: Path,
    data_dir: Path,
) -> None:
    run = tmp_path / "run"
    stop = ["+callbacks.stop._target_=helpers.training.SignalAtStep",
            f"+callbacks.stop.step={step}", f"+callbacks.stop.signal_name={signal_name}",
            f"+callbacks.stop.once={tmp_path / 'x'}"]
    stopped = run_train([*EPOCHS_OF_4, *stop, f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == saved_at
    resumed = run_train(["ckpt_path=last", f"hydra.run.dir={run}"], tmp_path, data_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    expected = load(uninterrupted / "checkpoints" / "last.ckpt")["state_dict"]
    actual = load(run / "checkpoints" / "last.ckpt")["state_dict"]
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    # The same validations: the same best checkpoint, tested to the same accuracy.
    for key in ("val/acc_best", "test/acc"):
        assert summary(run)["metrics"][key] == summary(uninterrupted)["metrics"][key], key
