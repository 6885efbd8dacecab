"""The results of a sweep whose jobs run under submitit (hydra/launcher=submitit_local, slurm),
printed in the console that launched it when its jobs have finished: one line per finished job
(its overrides, test/acc and val/acc_best, its summary.json) and one per failed job (its last
error line and its log).

hydra-submitit-launcher collects the jobs' results in order and raises submitit's 30-line
UncompletedJobError at the first job that failed, which hides the results of the others (and
leaves the jobs after it unwaited for); when every job finishes it prints nothing. Its launch is
therefore replaced (by :class:`ReportSubmititJobs`, conf/hydra/default.yaml) with
:func:`reporting_launch`, which waits for every job and prints the lines. Then, if a job failed,
a sweep by Hydra's basic sweeper ends with one line and exit status 1; the Optuna sweeper gets a
failed JobReturn for each failed trial, records it and goes on (hparams_search/optuna.yaml).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.experimental.callback import Callback
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import DictConfig, OmegaConf

from linarena.metrics import TEST_ACC, VAL_ACC_BEST
from linarena.training.summary import SUMMARY_FILE, read_summary

SUBMITIT_LAUNCHERS = {f"{submitit_launcher.__name__}.{name}"
                      for name in ("LocalLauncher", "SlurmLauncher")}
# reporting_launch repeats the launch of this version of the plugin; another version keeps its own
# launch (with a warning), so that an upgrade cannot run a stale copy.
PLUGIN_VERSION = "1.2.0"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
log = logging.getLogger(__name__)
# The metrics a finished job's line shows, from its summary.json.
SHOWN_METRICS = (TEST_ACC.key, VAL_ACC_BEST.key)


class JobFailed(RuntimeError):
    """The return value of a failed job's JobReturn (the Optuna sweeper logs its message)."""


def finished_line(job_num: int, overrides: Sequence[str], output_dir: Path) -> str:
    """One line for a job that finished: its metrics and the path of its summary.json."""
    summary_path = output_dir / SUMMARY_FILE
    summary = read_summary(output_dir)
    if summary is None:
        return f"Job #{job_num} ({' '.join(overrides)}) finished without {summary_path}"
    metrics = summary.get("metrics", {})
    shown = ", ".join(
        f"{key}={'null' if metrics.get(key) is None else format(metrics[key], '.4f')}"
        for key in SHOWN_METRICS
    )
    return f"Job #{job_num} ({' '.join(overrides)}): {shown} in {summary_path}"


def failed_line(job_num: int, overrides: Sequence[str], reason: str, log: Path) -> str:
    """One line for a job that failed: why, and where its log is."""
    return f"Job #{job_num} ({' '.join(overrides)}) failed: {reason} (log: {log})"


def last_error_line(log: Path) -> str | None:
    """The last non-blank line of a job's error log (progress bars rewrite their line with
    carriage returns: each rewrite counts as a line); None when the log is missing or blank."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else None


def failure_reason(returned: JobReturn | None, log: Path) -> str:
    """Why a job failed: the exception Hydra caught in it, else the last line of its error log
    (a job that exits, as train.py does after printing a config error, returns nothing)."""
    if returned is not None and isinstance(returned._return_value, BaseException):
        error = returned._return_value
        message = str(error).strip()
        return f"{type(error).__name__}: {message.splitlines()[0]}" if message else repr(error)
    return last_error_line(log) or "it ended without a result, and its error log is empty"


def collect(jobs: Sequence[Any], job_overrides: Sequence[Sequence[str]],
            initial_job_idx: int) -> tuple[list[JobReturn], list[str]]:
    """Wait for every submitit job, in order. Returns their JobReturns (a failed job's has status
    FAILED and a JobFailed) and the report's lines."""
    # Loaded here, as the plugin does: when a sweep launches, not when Hydra lists plugins.
    from submitit.core.utils import UncompletedJobError

    returns: list[JobReturn] = []
    lines: list[str] = []
    for offset, (job, overrides) in enumerate(zip(jobs, job_overrides, strict=True)):
        job_num, shown = initial_job_idx + offset, filter_overrides(overrides)
        try:
            returned: JobReturn | None = job.results()[0]
        except UncompletedJobError:  # no result: the job exited, was killed or timed out
            returned = None
        if returned is not None and returned.status == JobStatus.COMPLETED:
            output_dir = Path(returned.hydra_cfg.hydra.runtime.output_dir)
            lines.append(finished_line(job_num, shown, output_dir))
            returns.append(returned)
        else:
            log = Path(job.paths.stderr)
            lines.append(failed_line(job_num, shown, failure_reason(returned, log), log))
            returns.append(JobReturn(overrides=list(overrides), status=JobStatus.FAILED,
                                     _return_value=JobFailed(f"job #{job_num} failed (see above)")))
    return returns, lines


def reporting_launch(launcher: submitit_launcher.BaseSubmititLauncher,
                     job_overrides: Sequence[Sequence[str]],
                     initial_job_idx: int) -> list[JobReturn]:
    """BaseSubmititLauncher.launch of hydra-submitit-launcher 1.2 up to its last line (which
    collects the results in order and raises at the first failed job); then wait for every job,
    print the report's lines, and end a basic sweep with one line if a job failed.

    Also removes the empty folder named literally `%j` that submitit's local job controller
    makes (it creates its folder, the submitit_folder `.submitit/%j`, before putting the job id
    in); the jobs' own folders are `.submitit/<job id>/`.
    """
    import submitit  # as the plugin: loaded when a sweep launches, not when plugins are listed

    assert launcher.config is not None
    executor_name, params = launcher._EXECUTOR, launcher.params
    init_keys = {"submitit_folder", "max_num_timeout"}  # the executor's arguments
    init_params = {"folder": params["submitit_folder"]}
    if "max_num_timeout" in params:
        init_params[f"{executor_name}_max_num_timeout"] = params["max_num_timeout"]
    executor = submitit.AutoExecutor(cluster=executor_name, **init_params)
    shared = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{
        key if key in shared else f"{executor_name}_{key}": value
        for key, value in params.items() if key not in init_keys
    })
    sweep_config = launcher.config.hydra.sweep
    submitit_launcher.log.info(f"Submitit '{executor_name}' sweep output dir : {sweep_config.dir}")
    sweep_dir = Path(str(sweep_config.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in sweep_config:
        os.chmod(sweep_dir, mode=int(str(sweep_config.mode), 8))
    job_params = []
    for offset, overrides in enumerate(job_overrides):
        job_num = initial_job_idx + offset
        submitit_launcher.log.info(f"\t#{job_num} : {' '.join(filter_overrides(overrides))}")
        job_params.append((list(overrides), "hydra.sweep.dir", job_num, f"job_id_for_{job_num}",
                           Singleton.get_state()))
    jobs = executor.map_array(launcher, *zip(*job_params, strict=True))

    returns, lines = collect(jobs, job_overrides, initial_job_idx)
    print("\n".join(lines), flush=True)
    unformatted = Path(params["submitit_folder"])
    if "%j" in unformatted.name and unformatted.is_dir() and not any(unformatted.iterdir()):
        unformatted.rmdir()
    failed = sum(r.status == JobStatus.FAILED for r in returns)
    if failed and launcher.config.hydra.sweeper.get("_target_") == BASIC_SWEEPER:
        # The basic sweeper would raise the first failure, with a traceback hint; the lines above
        # say everything.
        print(f"Error: {failed} of {len(returns)} jobs failed (see above).", file=sys.stderr,
              flush=True)
        sys.exit(1)
    return returns


class ReportSubmititJobs(Callback):
    """Makes a sweep's submitit launcher (hydra/launcher=submitit_local, slurm) launch with
    :func:`reporting_launch`.

    Why by replacing the launcher class's method: Hydra builds launchers only from classes of a
    `hydra_plugins` package, so a subclass here cannot be named as hydra.launcher._target_. The
    method is replaced on the class Hydra's plugin registry builds for the target (its plugin
    scan re-executes the plugin modules, so their classes are the registry's), in the launching
    process only: the jobs unpickle the launcher and call it, never its launch.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        target = config.hydra.launcher.get("_target_")
        if target not in SUBMITIT_LAUNCHERS:
            return
        installed = importlib.metadata.version("hydra-submitit-launcher")
        if installed != PLUGIN_VERSION:
            log.warning("hydra-submitit-launcher %s is not %s, whose launch linarena extends: "
                        "the jobs' results are not printed at the end of this sweep (see each "
                        "job's summary.json).", installed, PLUGIN_VERSION)
            return
        Plugins.instance().class_name_to_class[target].launch = reporting_launch
