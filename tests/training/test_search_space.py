"""An Optuna search (hparams_search=optuna) whose space cannot be sampled ends before its first
trial, and one whose every trial diverged ends with advice: both in one message, where the
sweeper ended in a traceback (its distribution's ValueError; "No trials are completed yet")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.training import compose_with_hydra, run_train

from linarena.training.search_space import all_trials_diverged, search_space_problem

SMOKE = ["debug=smoke", "logger=none", "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize(("params", "says"), [
    ({"optim.lr": "interval(0.1, 0.01)"},
     r"optim\.lr=interval\(0\.1, 0\.01\): its low end 0\.1 is above its high end 0\.01; "
     r"write interval\(0\.01, 0\.1\)"),
    ({"optim.lr": "tag(log, interval(0, 0.01))"}, r"a log interval needs a low end above 0"),
    ({"model.num_layers": "range(4, 1)"}, r"its low end 4 is above its high end 1"),
    ({"optim.lr": "interval(0.1"}, r"optim\.lr=interval\(0\.1: not a search range"),
])
def test_a_search_space_that_cannot_be_sampled_is_named(params: dict, says: str) -> None:
    problem = search_space_problem({"model.dropout": "interval(0.0, 0.3)", **params})
    assert problem is not None and re.search(says, problem), problem


def test_the_shipped_search_space_can_be_sampled() -> None:
    params = compose_with_hydra(["hparams_search=optuna"]).hydra.sweeper.params
    assert search_space_problem(params) is None


def test_an_inverted_interval_ends_the_search_before_its_first_trial(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "hparams_search=optuna", *SMOKE, "optim.lr=interval(0.1,0.01)",
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: optim.lr=interval(0.1,0.01): its low end 0.1 is "
                                    "above its high end 0.01; write interval(0.01, 0.1).")
    assert "Traceback" not in result.stderr and not sweep_dir.exists()


def test_a_search_whose_every_trial_diverged_ends_with_advice(tmp_path: Path) -> None:
    result = run_train(["-m", "hparams_search=optuna", *SMOKE, "hydra.sweeper.n_trials=2",
                        "+callbacks.poison._target_=helpers.training.PoisonWeights",
                        "+callbacks.poison.at_step=1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                       tmp_path, tmp_path / "data")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: All 2 trials of the Optuna search diverged"), last
    assert "the learning rates tried" in last and "'optim.lr=tag(log, interval(" in last


def test_the_advice_is_a_tenth_of_the_learning_rates_tried() -> None:
    message = all_trials_diverged([0.002, 0.0001, None])
    assert message.startswith("All 3 trials of the Optuna search diverged")
    assert ("tried (0.0001 to 0.002), e.g. add 'optim.lr=tag(log, interval(1e-05, 0.0002))'"
            in message)
    assert "interval(1e-05, 0.0001)" in all_trials_diverged([0.001])  # below the one lr tried
    assert "a lower learning-rate range" in all_trials_diverged([None])
