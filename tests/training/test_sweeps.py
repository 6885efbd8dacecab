"""Sweeps (-m) say how every job ended and leave nothing misleading behind: under submitit, each
finished job's result and each failed job's reason and log when the jobs have finished; an
Optuna search that cannot run is refused in one line, one that can says what it does; a sweep
none of whose jobs started leaves no folder; Optuna's log lines carry no colour codes."""

from __future__ import annotations

import atexit
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
import submitit
from helpers.training import compose_with_hydra, run_train
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from omegaconf import OmegaConf
from submitit.core.utils import UncompletedJobError

from linarena.errors import NonFiniteStateError
from linarena.training.sweep_report import (
    BASIC_SWEEPER,
    JobFailed,
    ReportSubmititJobs,
    collect,
    reporting_launch,
)
from linarena.training.sweep_start import (
    OPTUNA_SWEEPER,
    PLAIN_HANDLER_NAME,
    SweepStart,
    remove_unused_sweep_folder,
)

SMOKE = ["debug=smoke", "logger=csv", "trainer.enable_progress_bar=false"]
CONFIG_ERROR = "Error: Could not build `optim`: optim.lr must be a number, got 'fast'."


# --- Fakes of submitit's jobs and executor, so that the launch is tested in milliseconds. ---

class FakeJob:
    """A submitit job that has ended: with a JobReturn, or without a result (it exited)."""

    def __init__(self, log: Path, returned: JobReturn | None) -> None:
        self.paths = SimpleNamespace(stderr=log)
        self.returned = returned

    def results(self) -> list[JobReturn]:
        if self.returned is None:
            raise UncompletedJobError("Job 12 (task: 0) has not produced any output")
        return [self.returned]


def finished_job(folder: Path, test_acc: float, val_acc_best: float) -> FakeJob:
    """A job that trained and wrote its summary.json in `folder`."""
    folder.mkdir(parents=True)
    metrics = {"test/acc": test_acc, "val/acc_best": val_acc_best}
    (folder / "summary.json").write_text(json.dumps({"metrics": metrics}))
    hydra_cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(folder)}}})
    returned = JobReturn(status=JobStatus.COMPLETED, hydra_cfg=hydra_cfg,
                         _return_value=val_acc_best)
    return FakeJob(folder / "unused.err", returned)


def exited_job(log: Path, last_words: str) -> FakeJob:
    """A job that printed an error and exited (train.py on a config error): no result."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"Seed set to 1\nsome progress\r more progress\r\n\n{last_words}\n\n")
    return FakeJob(log, None)


def raising_job(log: Path, error: Exception) -> FakeJob:
    """A job whose task raised (Hydra caught the exception in its JobReturn)."""
    return FakeJob(log, JobReturn(status=JobStatus.FAILED, _return_value=error))


def fake_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: list[FakeJob],
                sweeper: str) -> Callable[[], list[JobReturn]]:
    """reporting_launch of a submitit_local launcher over `jobs`, with submitit's executor
    replaced by one that makes the literal `.submitit/%j` folder, as submitit's local job
    controller does, and returns `jobs`."""

    class FakeExecutor:
        def __init__(self, cluster: str, folder: str, **params: Any) -> None:
            self.folder = Path(folder)

        def update_parameters(self, **params: Any) -> None:
            pass

        def map_array(self, fn: Any, *iterables: Any) -> list[FakeJob]:
            self.folder.mkdir(parents=True)
            return jobs

    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)
    sweep_dir = tmp_path / "sweep"
    launcher = submitit_launcher.LocalLauncher(submitit_folder=f"{sweep_dir}/.submitit/%j")
    launcher.config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep_dir)}, "sweeper": {"_target_": sweeper}}}
    )
    overrides = [[f"optim.lr={i}"] for i in range(len(jobs))]
    return lambda: reporting_launch(launcher, overrides, 0)


# --- 1. A failed submitit job hides nothing: every result, every failure, one line each. ---

def test_every_job_is_reported_finished_or_with_its_reason_and_log(tmp_path: Path) -> None:
    jobs = [
        finished_job(tmp_path / "0_softmax_s1", 0.25, 0.375),
        exited_job(tmp_path / ".submitit" / "12" / "12_0_log.err", CONFIG_ERROR),
        raising_job(tmp_path / "13_0_log.err", NonFiniteStateError("Training diverged\nat 3")),
    ]
    returns, lines = collect(jobs, [["optim.lr=1e-3", "hydra.verbose=true"], ["optim.lr=fast"],
                                    ["optim.lr=9"]], initial_job_idx=4)
    assert lines == [
        f"Job #4 (optim.lr=1e-3): test/acc=0.2500, val/acc_best=0.3750 in "
        f"{tmp_path / '0_softmax_s1' / 'summary.json'}",
        f"Job #5 (optim.lr=fast) failed: {CONFIG_ERROR} (log: {jobs[1].paths.stderr})",
        f"Job #6 (optim.lr=9) failed: NonFiniteStateError: Training diverged "
        f"(log: {jobs[2].paths.stderr})",
    ]
    assert [r.status for r in returns] == [JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.FAILED]
    assert returns[0].return_value == 0.375
    with pytest.raises(JobFailed, match=r"job #5 failed"):
        _ = returns[1].return_value


def test_a_basic_sweep_with_a_failed_job_ends_in_one_line_after_every_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    jobs = [finished_job(tmp_path / "0_softmax_s1", 0.25, 0.375),
            exited_job(tmp_path / "1.err", CONFIG_ERROR),
            finished_job(tmp_path / "2_softmax_s1", 0.5, 0.5)]
    launch = fake_launch(monkeypatch, tmp_path, jobs, BASIC_SWEEPER)
    with pytest.raises(SystemExit) as stopped:
        launch()
    assert stopped.value.code == 1
    out, err = capsys.readouterr()
    assert [line.split(" (")[0] for line in out.splitlines()] == ["Job #0", "Job #1", "Job #2"]
    assert err == "Error: 1 of 3 jobs failed (see above).\n"


def test_an_optuna_search_gets_its_failed_trials_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    launch = fake_launch(monkeypatch, tmp_path, [exited_job(tmp_path / "0.err", CONFIG_ERROR)],
                         OPTUNA_SWEEPER)
    [returned] = launch()
    assert returned.status == JobStatus.FAILED
    assert CONFIG_ERROR in capsys.readouterr().out


def test_submitit_sweeps_launch_with_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    basic = compose_with_hydra([])
    ReportSubmititJobs().on_multirun_start(basic)  # the basic launcher's sweeps: untouched
    assert Plugins.instance().class_name_to_class[basic.hydra.launcher._target_].launch \
        is not reporting_launch
    for launcher in ("submitit_local", "slurm"):
        cfg = compose_with_hydra([f"hydra/launcher={launcher}"])
        launcher_class = Plugins.instance().class_name_to_class[cfg.hydra.launcher._target_]
        monkeypatch.setattr(launcher_class, "launch", launcher_class.launch)  # undone after
        ReportSubmititJobs().on_multirun_start(cfg)
        assert launcher_class.launch is reporting_launch


@pytest.mark.slow
def test_a_submitit_sweep_with_a_failed_job_reports_every_job(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "hydra/launcher=submitit_local", *SMOKE, "optim.lr=1e-3,fast",
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 1
    finished, failed = [line for line in result.stdout.splitlines() if line.startswith("Job #")]
    summary = sweep_dir / "0_softmax_s1" / "summary.json"
    assert finished.startswith("Job #0 (") and "test/acc=" in finished
    assert finished.endswith(f"in {summary}") and summary.is_file()
    assert "optim.lr must be a number, got 'fast'" in failed
    log = Path(failed.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent.parent == sweep_dir / ".submitit"
    assert result.stderr.strip() == "Error: 1 of 2 jobs failed (see above)."


# --- 2. A submitit sweep that succeeds prints its results and leaves no `.submitit/%j`. ---

def test_the_literal_job_id_folder_is_removed_and_the_results_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    launch = fake_launch(monkeypatch, tmp_path, [finished_job(tmp_path / "0_s1", 0.5, 0.25)],
                         BASIC_SWEEPER)
    [returned] = launch()
    assert returned.return_value == 0.25
    assert capsys.readouterr().out.startswith("Job #0 (optim.lr=0): test/acc=0.5000")
    assert not (tmp_path / "sweep" / ".submitit" / "%j").exists()


@pytest.mark.slow
def test_a_submitit_sweep_prints_its_results(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "hydra/launcher=submitit_local", *SMOKE,
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = sweep_dir / "0_softmax_s1" / "summary.json"
    assert f"val/acc_best={json.loads(summary.read_text())['metrics']['val/acc_best']:.4f} in " \
           f"{summary}" in result.stdout
    assert [p.name for p in (sweep_dir / ".submitit").iterdir() if "%" in p.name] == []


# --- 3. An Optuna search with no trials is refused in one line, before anything starts. ---

@pytest.fixture
def sweep_exits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Callable[..., None], Path]]:
    """The cleanups SweepStart registers for the process's exit, kept here instead."""
    registered: list[tuple[Callable[..., None], Path]] = []
    monkeypatch.setattr(atexit, "register", lambda fn, folder: registered.append((fn, folder)))
    return registered


@pytest.fixture
def optuna_logging() -> Iterator[None]:
    """Optuna's own log handler back in place after the test."""
    yield
    logger = logging.getLogger("optuna")
    for handler in [h for h in logger.handlers if h.get_name() == PLAIN_HANDLER_NAME]:
        logger.removeHandler(handler)
    optuna.logging.enable_default_handler()


@pytest.mark.parametrize("override, message", [
    ("hydra.sweeper.n_trials=0", "n_trials must be >= 1"),
    ("hydra.sweeper.n_jobs=0", "n_jobs must be >= 1"),
    ("hydra.sweeper.storage=sqlite:///study.db", "leave hydra.sweeper.storage=null"),
])
def test_an_optuna_search_that_cannot_run_is_one_line(
    override: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture,
    sweep_exits: list, optuna_logging: None,
) -> None:
    cfg = compose_with_hydra(["hparams_search=optuna", override, f"hydra.sweep.dir={tmp_path}/s"])
    with pytest.raises(SystemExit) as stopped:
        SweepStart().on_multirun_start(cfg)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: hydra.sweeper.") and message in err and err.count("\n") == 1


def test_no_trials_ends_before_the_study_with_one_line(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "hparams_search=optuna", "hydra.sweeper.n_trials=0",
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 1
    assert result.stderr == ("Error: hydra.sweeper.n_trials=0: an Optuna search needs at least "
                             "one trial (n_trials must be >= 1).\n")
    assert not sweep_dir.exists()


# --- 4. A sweep none of whose jobs started leaves no sweep folder. ---

def test_only_a_sweep_folder_no_job_used_is_removed(tmp_path: Path) -> None:
    unused, used = tmp_path / "unused", tmp_path / "used"
    for folder in (unused, used):
        folder.mkdir()
        (folder / "multirun.yaml").write_text("hydra: {}\n")
    (used / ".submitit").mkdir()  # the logs of jobs that ran (and failed)
    remove_unused_sweep_folder(unused)
    remove_unused_sweep_folder(used)
    remove_unused_sweep_folder(tmp_path / "absent")
    assert not unused.exists() and used.is_dir()


def test_the_cleanup_is_registered_for_a_new_folder_only(
    tmp_path: Path, sweep_exits: list
) -> None:
    (tmp_path / "empty").mkdir()  # e.g. made by a callback that checks it can be written
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    for name in ("new", "empty", "old"):
        SweepStart().on_multirun_start(compose_with_hydra([f"hydra.sweep.dir={tmp_path / name}"]))
    assert sweep_exits == [(remove_unused_sweep_folder, tmp_path / "new"),
                           (remove_unused_sweep_folder, tmp_path / "empty")]


def test_a_refused_sweep_leaves_no_sweep_folder(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_train(["-m", "trainer.max_steps=-5", f"hydra.sweep.dir={sweep_dir}"],
                       tmp_path, tmp_path / "data")
    assert result.returncode == 1
    assert "trainer.max_steps=-5 trains nothing" in result.stderr
    assert not sweep_dir.exists()


# --- 5. An Optuna search says what it does; its log lines carry no colour codes. ---

def test_an_optuna_search_says_what_it_runs_and_logs_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture, sweep_exits: list, optuna_logging: None
) -> None:
    cfg = compose_with_hydra(["hparams_search=optuna", f"hydra.sweep.dir={tmp_path}/s"])
    SweepStart().on_multirun_start(cfg)
    SweepStart().on_multirun_start(cfg)  # once more: still one handler
    notice = capsys.readouterr().out.splitlines()[0]
    assert notice.startswith("Optuna search: 20 trials, maximising val/acc_best")
    assert "cannot be resumed" in notice
    optuna.logging.get_logger("optuna.test").info("A new study created in memory")
    err = capsys.readouterr().err
    assert err.count("A new study created in memory") == 1 and "\x1b[" not in err


def test_an_optuna_search_prints_no_colour_codes(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    # The first trial is refused (a config error): the search's start is all this needs.
    result = run_train(["-m", "hparams_search=optuna", "trainer.max_steps=-5",
                        f"hydra.sweep.dir={sweep_dir}"], tmp_path, tmp_path / "data")
    assert result.returncode == 1
    assert "A new study created in memory with name: linarena" in result.stderr
    assert "\x1b[" not in result.stdout + result.stderr
    assert result.stdout.startswith("Optuna search: 20 trials")
    assert not sweep_dir.exists()
