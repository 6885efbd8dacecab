"""An interrupted multirun is completed by one command, the one a stopped job prints: the same
`python train.py -m ...` with the same hydra.sweep.dir skips the finished jobs, resumes the
stopped one and trains the rest."""

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


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


@pytest.mark.slow
def test_an_interrupted_sweep_is_completed_by_the_command_it_prints(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    sweep = tmp_path / "my sweep"  # a space, and a list override: the command is quoted
    stop = ["+callbacks.stop._target_=helpers.training.SignalAtStep", "+callbacks.stop.step=3",
            "+callbacks.stop.signal_name=SIGTERM", f"+callbacks.stop.once={tmp_path / 'x'}"]
    args = ["-m", *SMOKE, "trainer.max_steps=6", "attention=softmax,elu", "tags=[a,b]", *stop,
            f"hydra.sweep.dir={sweep}"]
    stopped = run_train(args, tmp_path, data_dir)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert not (sweep / "1_elu_s1").exists()  # the jobs after the stopped one never started
    found = re.search(r"complete the sweep[^:]*: (python train\.py -m .*)$", stopped.stderr,
                      re.MULTILINE)
    assert found, stopped.stderr[-3000:]
    words = shlex.split(found.group(1))
    assert words == ["python", "train.py", *args]

    completed = run_train(words[2:], tmp_path, data_dir)
    assert completed.returncode == 0, completed.stderr[-3000:]
    stopped_job, next_job = sweep / "0_softmax_s1", sweep / "1_elu_s1"
    history = yaml.safe_load((stopped_job / "resume_history.yaml").read_text())
    assert [h["from_step"] for h in history] == [3]
    assert summary(stopped_job)["global_step"] == summary(next_job)["global_step"] == 6
    assert "resumes" not in summary(next_job) or not summary(next_job)["resumes"]

    # Run once more, nothing is left: every job is skipped, nothing changes.
    before = {job: (job / "summary.json").read_bytes() for job in (stopped_job, next_job)}
    weights = torch.load(next_job / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    again = run_train(words[2:], tmp_path, data_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("already finished") == 2, again.stdout[-3000:]
    assert {job: (job / "summary.json").read_bytes() for job in before} == before
    after = torch.load(next_job / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(weights[name], after[name]) for name in weights)
