"""What a run prints: no library noise a user cannot act on, and lines that say what happens
(at 5f661cc a resume with 182 steps left said "Training 600 steps", and the model summary ended in
"0 Total Flops")."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from linarena.training.progress import CompactModelSummary, StepProgress


def test_a_resumed_run_says_which_steps_it_trains(caplog: pytest.LogCaptureFixture) -> None:
    progress = StepProgress()
    progress.plain = True
    with caplog.at_level(logging.INFO):
        progress.on_train_start(SimpleNamespace(global_step=418, max_steps=600), None)
        progress.on_train_start(SimpleNamespace(global_step=0, max_steps=600), None)
    assert "Training steps 419-600 of 600 (resumed at step 418)" in caplog.text
    assert "Training 600 steps" in caplog.text


def test_the_model_summary_has_no_zero_flops_line(caplog: pytest.LogCaptureFixture) -> None:
    data = [(" ", ["0"]), ("Name", ["model"]), ("Type", ["Net"]), ("Params", ["1 K"]),
            ("Mode", ["train"]), ("FLOPs", ["0"])]
    with caplog.at_level(logging.INFO):
        CompactModelSummary.summarize(data, 1000, 1000, 0.004, {"train": 1, "eval": 0}, 0)
    assert "Total params" in caplog.text
    assert "Flops" not in caplog.text and "FLOPs" not in caplog.text


def test_a_default_run_prints_no_library_noise(tmp_path) -> None:
    from helpers.training import run_train

    small = ["data.num_train=64", "data.num_val=16", "data.num_test=16", "trainer.max_steps=2",
             "logger=csv", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_train(small, tmp_path, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout + result.stderr
    assert "Trainer already configured with model summary" not in printed
    assert "Total Flops" not in printed
    assert "Total params" in printed  # the summary itself is still there
