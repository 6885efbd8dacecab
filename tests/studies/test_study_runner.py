"""The one runner and report of every study (linarena.studies.study): the to-do list from the
grid's tasks, resumed from run folders and from an archive, and the report's files with their
provenance records."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.mqar import fake_run
from helpers.paths import REPO_ROOT

from linarena.studies.study import StudyPoint, group_tasks, launch_env, pending, write_report


def test_attentions_at_one_point_share_a_task_in_first_seen_order() -> None:
    a, b = StudyPoint(16, 3, 1e-2, 1), StudyPoint(32, 0, 1e-3, 2)
    tasks = group_tasks([(a, "elu"), (b, "softmax"), (a, "taylor")])
    assert tasks == [(a, ["elu", "taylor"]), (b, ["softmax"])]


def test_the_to_do_list_skips_finished_and_archived_runs(tmp_path: Path) -> None:
    fake_run(tmp_path, "elu", 16, 3, 1e-2, val=0.5, test=0.5)
    here, other = StudyPoint(16, 3, 1e-2, 1), StudyPoint(32, 3, 1e-2, 1)
    tasks = [(here, ["elu", "softmax"]), (other, ["elu"])]
    assert pending(tasks, tmp_path, frozenset()) == [(here, ["softmax"]), (other, ["elu"])]
    archived = frozenset({f"{other.folder_name}/elu", f"{here.folder_name}/softmax"})
    assert pending(tasks, tmp_path, archived) == []


def test_runs_of_several_threads_wait_passively_unless_the_user_chose(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert launch_env(2)["OMP_WAIT_POLICY"] == "PASSIVE"
    assert launch_env(2)["OMP_NUM_THREADS"] == launch_env(2)["MKL_NUM_THREADS"] == "2"
    assert "OMP_WAIT_POLICY" not in launch_env(1)  # one thread waits for no other
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert launch_env(2)["OMP_WAIT_POLICY"] == "ACTIVE"
    assert launch_env(2, {"OMP_WAIT_POLICY": "PASSIVE"})["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_report_writes_each_file_whole_with_its_provenance(tmp_path: Path) -> None:
    table = pd.DataFrame({"attention": ["elu", "softmax"], "n_seeds": [3, 3]})
    paths = write_report(tmp_path / "out", "study", {
        ".csv": table, ".md": "| a |\n", ".txt": lambda path: path.write_text("drawn\n"),
    }, "python scripts/some_study.py --report-only")
    assert [path.name for path in paths] == ["study.csv", "study.md", "study.txt"]
    assert pd.read_csv(paths[0]).equals(table) and paths[2].read_text() == "drawn\n"
    records = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert set(records) == {"study.csv", "study.md", "study.txt"}
    assert records["study.csv"]["rows"] == 2
    assert records["study.md"]["command"] == "python scripts/some_study.py --report-only"


# Stands in for train.py: says when it starts, then waits; on SIGTERM or SIGINT it says so (where
# train.py would save its checkpoint) and exits as train.py does, or with FAKE_TRAIN_HANGS set
# goes on waiting.
FAKE_TRAIN = """
import os, signal, sys, time
from pathlib import Path

def note(what):
    with Path(os.environ["FAKE_TRAIN_LOG"]).open("a") as log:
        log.write(f"{os.getpid()} {what}\\n")

def stop(signum, frame):
    note(signal.Signals(signum).name)
    if not os.environ.get("FAKE_TRAIN_HANGS"):
        sys.exit(128 + signum)

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
note("started")
while True:
    time.sleep(1)
"""
# Runs a study script (argv[3:]) with the study's train.py replaced by argv[1] and the time it
# gives its runs to stop set to argv[2] seconds.
WITH_FAKE_TRAIN = """
import runpy, sys
from pathlib import Path
import linarena.studies.processes as processes
import linarena.studies.study as study
study.TRAIN_PY = Path(sys.argv[1])
processes.STOP_WAIT_S = float(sys.argv[2])
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_a_study(tmp_path: Path, argv: list[str], signal_name: str, stop_wait_s: float,
                 env: dict[str, str]) -> tuple[subprocess.Popen, str, list[str]]:
    """Start the study script `argv` with the fake train.py, send it `signal_name` once its
    first run started; (the study after it exited, its stderr, the fake runs' log lines)."""
    fake = tmp_path / "train.py"
    fake.write_text(FAKE_TRAIN)
    log = tmp_path / "train.log"
    python_path = os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    study = subprocess.Popen(
        [sys.executable, "-c", WITH_FAKE_TRAIN, str(fake), str(stop_wait_s), *argv],
        cwd=REPO_ROOT, env={**os.environ, "FAKE_TRAIN_LOG": str(log),
                            "PYTHONPATH": python_path, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    while not log.is_file() and time.monotonic() - started < 60:
        time.sleep(0.1)
    try:
        study.send_signal(getattr(signal, signal_name))
        _, err = study.communicate(timeout=60)
    finally:
        study.kill()
        for line in log.read_text().splitlines():
            if alive(int(line.split()[0])):
                os.kill(int(line.split()[0]), signal.SIGKILL)
                raise AssertionError(f"a run outlived its study: {line}")
    return study, err, log.read_text().splitlines()


SWEEP = ["scripts/seed_sweep.py", "--seeds", "1", "--more-seeds", "--jobs", "1",
         "--attention", "elu", "softmax"]


@pytest.mark.parametrize(("signal_name", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_to_a_study_stops_its_runs_and_says_how_to_resume(
        signal_name: str, code: int, tmp_path: Path) -> None:
    argv = [*SWEEP, "--root", str(tmp_path / "sweep")]
    study, err, lines = stop_a_study(tmp_path, argv, signal_name, 60, {})
    assert study.returncode == code, err
    # The run was told once and stopped, and no other run started after the signal.
    pid = lines[0].split()[0]
    assert lines == [f"{pid} started", f"{pid} {signal_name}"]
    assert signal_name in err and "seed1" in err
    resume = err.split("the same command: ", 1)[1].splitlines()[0]
    assert shlex.split(resume) == ["python", *argv]


def test_a_run_that_does_not_stop_in_time_is_killed(tmp_path: Path) -> None:
    argv = [*SWEEP, "--root", str(tmp_path / "sweep")]
    study, err, lines = stop_a_study(tmp_path, argv, "SIGTERM", 1, {"FAKE_TRAIN_HANGS": "1"})
    assert study.returncode == 143, err
    assert [line.split()[1] for line in lines] == ["started", "SIGTERM"]
    assert "killed after 1 s without stopping" in err
