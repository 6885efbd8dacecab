"""A Hydra callback that says, before a sweep starts, where its jobs' output goes when a launcher
runs them in other processes (submitit): the console would otherwise stay silent until every
job has finished."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class LaunchNotice(Callback):
    """Prints one line at the start of a multirun whose launcher writes the jobs' output to
    files."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = config.hydra.launcher
        folder = launcher.get("submitit_folder")
        if folder is None:  # Hydra's basic launcher: the jobs print to this console
            return
        print(
            f"Each job's output (progress, results) goes to {folder.replace('%j', '<job id>')}/"
            "<job id>_0_log.out and .err, not to this console, which prints the results when "
            f"every job has finished; follow one with: tail -f {config.hydra.sweep.dir}"
            "/.submitit/*/*_0_log.out",
            flush=True,
        )
