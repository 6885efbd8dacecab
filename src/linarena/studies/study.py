"""The one runner and report of a study: a to-do list of train.py runs, resumed from the run
folders and from a runs CSV, trained a few points at a time, then written with provenance.

A study declares its grid as tasks: a Point (the state-size study's StudyPoint: width, short
conv, lr, seed; the mixture's MixturePoint: positions, seed) with the attentions to train
there; the attentions at one point are trained by one `train.py -m` call (one process start
for all of them; train_commands), a folder per run, `<root>/<point folder>/<attention>/`
(summary.json and .hydra/config.yaml).
`pending` is the one to-do list: a run with a summary.json is skipped, so an interrupted study
resumes where it stopped; a run folder without one (a killed run) is started again from scratch.
A study that spans machines or sessions also resumes from the runs CSV it wrote before
(runs.load_archive, checked against the preset's protocol): the runs listed there are finished
too. `write_report` writes the study's files atomically, each with its provenance record.
SIGTERM or SIGINT (Ctrl+C) to a study is passed on to its train.py runs (processes.Children).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import pandas as pd
from filelock import Timeout

from linarena.analysis.provenance import record
from linarena.attention.variants import CONF_DIR, variant_names
from linarena.files import build_lock, write_atomic, write_text_atomic
from linarena.studies.processes import Children
from linarena.training.summary import SUMMARY_FILE, read_summary

TRAIN_PY = CONF_DIR.parent / "train.py"


def train_commands(preset: str | None, settings: Sequence[str], names: Sequence[str],
                   folder: Path, entries: Mapping[str, Sequence[str]] | None = None,
                   sweep_dir: Path | None = None, process_per_run: bool = False
                   ) -> list[list[str]]:
    """The train.py calls that train `names` with the point's `settings` (train.py overrides)
    under experiment=`preset` (None: the default config), one folder per name, <folder>/<name>/
    (summary.json, .hydra/config.yaml): the plain variants in one multirun (one process start
    for all), each name with study entries (a variant's settings or a hybrid's model.pattern,
    preset.load_grid) in its own call. `sweep_dir` (default `folder`, which it must hold) is
    the multirun folder the runs are compared by (summary.sweep_label): a sweep's seeds in
    <sweep_dir>/seed<s>/ are one sweep. With `process_per_run`, every name has its own call:
    on CPU a run's peak memory is its process's resident set, which holds what earlier runs of
    the process left in the heap (training.perf), so a published memory figure needs its own
    process."""
    entries = dict(entries or {})
    if process_per_run:
        entries = {name: entries.get(name, ()) for name in names}
    sweep_dir = sweep_dir or folder
    prefix = folder.relative_to(sweep_dir).as_posix()

    def subdir(name: str) -> str:
        return name if prefix == "." else f"{prefix}/{name}"

    head = [sys.executable, str(TRAIN_PY), "-m",
            *([f"experiment={preset}"] if preset is not None else [])]
    common = [*settings, "logger=none", f"hydra.sweep.dir={sweep_dir}"]
    plain = [name for name in names if name not in entries]
    calls = [[*head, f"attention={','.join(plain)}", *common,
              f"hydra.sweep.subdir={subdir('${hydra:runtime.choices.attention}')}"]
             ] if plain else []
    for name in names:
        if name in entries:
            # A hybrid's blocks come from its model.pattern, a variant's from attention=.
            variant = [f"attention={name}"] if name in variant_names() else []
            calls.append([*head, *variant, *common, *entries[name],
                          f"hydra.sweep.subdir='{subdir(name)}'"])
    return calls


class Point(Protocol):
    """What the runner needs of a study's point: its folder under the study's root and the
    train.py calls that train some attentions there (train_commands)."""

    @property
    def folder_name(self) -> str: ...

    def commands(self, preset: str | None, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]: ...


class SettingsPoint:
    """A Point given by its train.py overrides (`settings`) and its `folder_name`; subclasses are
    frozen dataclasses that define those two."""

    @property
    def settings(self) -> list[str]:
        raise NotImplementedError

    @property
    def folder_name(self) -> str:
        raise NotImplementedError

    def commands(self, preset: str | None, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]:
        """train_commands at this point, into <root>/<folder_name>/<name>/."""
        return train_commands(preset, self.settings, names, root / self.folder_name, entries)


@dataclasses.dataclass(frozen=True)
class StudyPoint(SettingsPoint):
    """One point of the state-size grid: the attentions at it are trained together."""

    d_model: int
    short_conv: int
    lr: float
    seed: int

    @property
    def folder_name(self) -> str:
        return f"d{self.d_model}_conv{self.short_conv}_lr{self.lr:.2e}_seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [f"model.d_model={self.d_model}", f"model.short_conv={self.short_conv}",
                f"optim.lr={self.lr}", f"seed={self.seed}"]


# A point and the attentions to train there.
Task = tuple[Point, list[str]]


def group_tasks(runs: Iterable[tuple[Point, str]]) -> list[Task]:
    """(point, attention) pairs as tasks, the attentions that share a point in one task (one
    train.py call), in the order the points first appear."""
    by_point: dict[Point, list[str]] = {}
    for point, attention in runs:
        by_point.setdefault(point, []).append(attention)
    return list(by_point.items())


def missing(point: Point, root: Path, attentions: Sequence[str],
            archived: frozenset[str] = frozenset()) -> list[str]:
    """The attentions at `point` without a summary.json yet, nor a row in the archive (the
    `run` ids, "<point folder>/<attention>", of runs.load_archive)."""
    folder = root / point.folder_name
    return [name for name in attentions if not (folder / name / SUMMARY_FILE).is_file()
            and f"{point.folder_name}/{name}" not in archived]


def pending(tasks: Iterable[Task], root: Path, archived: frozenset[str]) -> list[Task]:
    """The to-do list: each task with the attentions not finished under `root` nor archived;
    tasks with none left are dropped."""
    return [(point, left) for point, names in tasks
            if (left := missing(point, root, names, archived))]


def launch_env(threads: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a study's train.py: this process's, `threads` OpenMP and MKL threads,
    then `env`. A run of several threads also gets OMP_WAIT_POLICY=PASSIVE unless it is set:
    OpenMP threads that spin while they wait for each other make a run on a busy machine 5-15x
    slower (measured: a 30-step two-thread DeltaNet run on ListOps, 773 s spinning, 58 s
    passive), and the wait policy changes no number (the same weights bit for bit)."""
    launched = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if threads > 1:
        launched.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return launched | dict(env or {})


def run_point(
    point: Point, preset: str | None, root: Path, attentions: Sequence[str], threads: int,
    extra: Sequence[str] = (), env: Mapping[str, str] | None = None,
    entries: Mapping[str, Sequence[str]] | None = None, children: Children | None = None,
) -> str:
    """Train the unfinished attentions at `point` (one train.py -m call) unless another study
    process holds it; `env`: variables set for train.py beyond this process's (e.g. a CPU
    kernel path, studies.cross_kernel); `entries`: the study's entries (train_commands);
    `children`: the study's processes (run_tasks), which a signal stops.
    Returns "done", "busy", "ok", "ok (a run diverged)", "stopped" (by a signal) or
    "failed (...)"."""
    children = children or Children()
    folder = root / point.folder_name
    try:
        with build_lock(folder, timeout=0):
            todo = missing(point, root, attentions)
            if not todo:
                return "done"
            for name in todo:  # a killed run: start it again from scratch
                shutil.rmtree(folder / name, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            codes = []
            with open(folder / "console.log", "a") as console:
                for command in point.commands(preset, todo, root, entries):
                    code = children.call([*command, *extra], str(folder), stdout=console,
                                         stderr=subprocess.STDOUT,
                                         env=launch_env(threads, env))
                    if code is None or children.stopped_by is not None:
                        return "stopped"
                    codes.append(code)
            code = max(codes)
            left = missing(point, root, attentions)
            if left:
                return f"failed (exit {code}, missing {left})"
            # train.py exits 1 for a diverged run, which still wrote its summary.json
            return "ok" if code == 0 else "ok (a run diverged)"
    except Timeout:
        return "busy"


@dataclasses.dataclass
class Progress:
    """One console line per finished run, with its result and the time left."""

    total_runs: int
    done_runs: int = 0
    started: float = dataclasses.field(default_factory=time.monotonic)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def report(self, point: Point, names: Sequence[str], root: Path, outcome: str) -> None:
        with self.lock:  # points finish on several threads
            for name in names:
                self._line(point, name, root, outcome)

    def _line(self, point: Point, name: str, root: Path, outcome: str) -> None:
        """The line of run `name` at `point`: its result, or where its log is."""
        self.done_runs += 1
        folder = root / point.folder_name / name
        summary = read_summary(folder) or {}
        metrics = summary.get("metrics", {})
        if summary.get("diverged"):
            result = f"diverged at step {summary.get('global_step')} (no accuracy)"
        elif metrics.get("test/acc") is not None:
            result = (f"test {100 * metrics['test/acc']:.1f}%, val "
                      f"{100 * metrics['val/acc_best']:.1f}%, {summary.get('global_step')} "
                      f"steps, {summary.get('duration_s', 0):.0f} s")
        else:
            result = f"{outcome}; log {root / point.folder_name / 'console.log'}"
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done_runs * (self.total_runs - self.done_runs)
        print(f"[{self.done_runs}/{self.total_runs}] {point.folder_name}/{name}: {result}; "
              f"ETA {left / 60:.0f} min", flush=True)


def run_tasks(tasks: list[Task], preset: str | None, root: Path, jobs: int, threads: int,
              extra: Sequence[str], counts: dict[str, int],
              env: Mapping[str, str] | None = None,
              entries: Mapping[str, Sequence[str]] | None = None) -> None:
    """Train each (point, attentions) task, `jobs` at a time (`env`, `entries`: see run_point),
    printing one line per run and counting each outcome of run_point into `counts`. A SIGTERM,
    SIGINT or SIGHUP stops the runs (Children) and then the study (SystemExit)."""
    progress = Progress(sum(len(names) for _, names in tasks))
    children = Children()

    def one(task: Task) -> None:
        point, names = task
        outcome = run_point(point, preset, root, names, threads, extra, env, entries, children)
        if outcome == "stopped":
            return
        counts[outcome] = counts.get(outcome, 0) + 1
        progress.report(point, names, root, outcome)

    with children.passing_signals_on(), ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, tasks))
    children.exit_if_stopped()


# What write_report writes per file: a table (CSV), a text (markdown), or a figure (a function
# that draws into the path).
Output = pd.DataFrame | str | Callable[[Path], None]


def write_report(out: Path, name: str, outputs: Mapping[str, Output], command: str) -> list[Path]:
    """Write out/<name><suffix> for each (suffix, output), each file whole or not at all, then
    their provenance records (<out>/provenance.json) with `command`. Returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, output in outputs.items():
        path = out / f"{name}{suffix}"
        if isinstance(output, pd.DataFrame):
            write_atomic(path, lambda f, table=output: table.to_csv(f, index=False))
        elif isinstance(output, str):
            write_text_atomic(path, output)
        else:
            output(path)
        paths.append(path)
    record(paths, command)
    return paths
