"""The MQAR state-size study: which runs it makes and how they are launched.

A study preset (conf/experiment/mqar_study_*.yaml) holds the training settings and a `study:`
block with the grid: model widths, short-conv settings, learning rates, seeds, and `lr_seed`.
Every attention variant of conf/attention/ gets the same grid: one `train.py -m` call per point
(one process start for all its attentions), a folder per run,
`<root>/d<width>_conv<k>_lr<lr>_seed<s>/<attention>/` (summary.json and .hydra/config.yaml). A
run with a summary.json is skipped, so an interrupted study resumes where it stopped; a run
folder without one (a killed run) is started again from scratch. A study that spans machines or
sessions also resumes from the runs CSV it wrote before (`archived`, mqar_results.load_archive):
the runs listed there are finished too.

With `lr_seed: null` every (lr, seed) is trained. With `lr_seed: <s>` the learning rate of each
(attention, short conv, width) is chosen on seed s's runs (validation only, mqar_results.choose_lr)
and the other seeds run at that learning rate only: fewer runs, said in the table's caption.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import Timeout
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig

from linarena.analysis.mqar_results import choose_lr, combine, load_study
from linarena.attention.variants import CONF_DIR, check_variant_names, variant_names
from linarena.errors import ConfigError
from linarena.files import build_lock
from linarena.training.summary import SUMMARY_FILE, read_summary

TRAIN_PY = CONF_DIR.parent / "train.py"


@dataclasses.dataclass(frozen=True)
class StudyPoint:
    """One point of the grid: the attentions at it are trained by one `train.py -m` call."""

    d_model: int
    short_conv: int
    lr: float
    seed: int

    @property
    def folder_name(self) -> str:
        return f"d{self.d_model}_conv{self.short_conv}_lr{self.lr:.2e}_seed{self.seed}"

    def command(self, preset: str, attentions: Sequence[str], root: Path) -> list[str]:
        """The train.py multirun over `attentions` at this point: one folder per attention,
        <root>/<folder_name>/<attention>/ (summary.json, .hydra/config.yaml)."""
        return [sys.executable, str(TRAIN_PY), "-m", f"experiment={preset}",
                f"attention={','.join(attentions)}", f"model.d_model={self.d_model}",
                f"model.short_conv={self.short_conv}", f"optim.lr={self.lr}",
                f"seed={self.seed}", "logger=none",
                f"hydra.sweep.dir={root / self.folder_name}",
                "hydra.sweep.subdir=${hydra:runtime.choices.attention}"]


def study_presets(conf_dir: Path = CONF_DIR) -> list[str]:
    """The study presets: conf/experiment/mqar_study_*.yaml."""
    return sorted(path.stem for path in (conf_dir / "experiment").glob("mqar_study_*.yaml"))


def _compose(preset: str, overrides: Sequence[str], conf_dir: Path) -> DictConfig:
    """The config of `experiment=<preset>` with `overrides`; an unknown preset, or an override
    Hydra cannot apply, is a ConfigError of one line (the study presets, Hydra's reason)."""
    if not (conf_dir / "experiment" / f"{preset}.yaml").is_file():
        raise ConfigError(f"--preset {preset}: no such preset (no {conf_dir}/experiment/"
                          f"{preset}.yaml); the study presets: {', '.join(study_presets(conf_dir))}")
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            return compose(config_name="config", overrides=[f"experiment={preset}", *overrides])
    except HydraException as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"experiment={preset} {' '.join(overrides)}: {reason}") from error


def load_grid(preset: str, overrides: Sequence[str] = (),
              conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The `study:` block of conf/experiment/<preset>.yaml, with `overrides` of it
    (e.g. "study.widths=[16,32]"): widths, short_conv, lrs and seeds lists, and lr_seed (None:
    every seed tries every lr)."""
    cfg = _compose(preset, overrides, conf_dir)
    if "study" not in cfg:
        raise ValueError(f"experiment={preset} has no `study:` block (widths, short_conv, lrs, "
                         "seeds); use a study preset such as mqar_study_cpu")
    keys = ("widths", "short_conv", "lrs", "seeds")
    grid: dict[str, Any] = {key: list(cfg.study.get(key) or []) for key in keys}
    empty = [key for key in keys if not grid[key]]
    if empty:
        raise ValueError(f"experiment={preset}: study.{empty[0]} is empty; list at least one value")
    grid["lr_seed"] = cfg.study.get("lr_seed")
    if grid["lr_seed"] is not None and grid["lr_seed"] not in grid["seeds"]:
        raise ValueError(f"experiment={preset}: study.lr_seed={grid['lr_seed']} is not one of "
                         f"study.seeds {grid['seeds']}; pick one of them or null")
    return grid


def preset_protocol(preset: str, overrides: Sequence[str] = (),
                    conf_dir: Path = CONF_DIR) -> dict[str, int]:
    """The preset's value (with `overrides`) of each mqar_results.PROTOCOL column: what an
    archived run must match to count as a run of this study."""
    cfg = _compose(preset, overrides, conf_dir)
    return {"num_layers": cfg.model.num_layers, "max_steps": cfg.trainer.max_steps,
            "vocab_size": cfg.data.vocab_size, "seq_len": cfg.data.max_length,
            "num_pairs": cfg.data.num_pairs}


def plan_points(grid: dict[str, Any], seeds: Sequence[int] | None = None) -> list[StudyPoint]:
    """Every (width, short_conv, lr, seed) of the grid for `seeds` (default: the grid's),
    ordered so that a partial study is as useful as possible: seed by seed, all points at the
    middle learning rate first, then the neighbouring ones; short conv on first, then by width."""
    lrs = [float(lr) for lr in grid["lrs"]]
    middle = (len(lrs) - 1) / 2
    rank = {lr: abs(index - middle) for index, lr in enumerate(lrs)}
    seeds = grid["seeds"] if seeds is None else seeds
    points = [StudyPoint(int(width), int(conv), lr, int(seed)) for width, conv, lr, seed
              in itertools.product(grid["widths"], grid["short_conv"], lrs, seeds)]
    return sorted(points, key=lambda p: (seeds.index(p.seed), rank[p.lr], -p.short_conv,
                                         p.d_model))


def missing(point: StudyPoint, root: Path, attentions: Sequence[str],
            archived: frozenset[str] = frozenset()) -> list[str]:
    """The attentions at `point` without a summary.json yet, nor a row in the archive (the
    `run` ids, "<point folder>/<attention>", of mqar_results.load_archive)."""
    folder = root / point.folder_name
    return [name for name in attentions if not (folder / name / SUMMARY_FILE).is_file()
            and f"{point.folder_name}/{name}" not in archived]


def run_point(
    point: StudyPoint, preset: str, root: Path, attentions: Sequence[str], threads: int,
    extra: Sequence[str] = (),
) -> str:
    """Train the unfinished attentions at `point` (one train.py -m call) unless another study
    process holds it. Returns "done", "busy", "ok", "ok (a run diverged)" or "failed (...)"."""
    folder = root / point.folder_name
    try:
        with build_lock(folder, timeout=0):
            todo = missing(point, root, attentions)
            if not todo:
                return "done"
            for name in todo:  # a killed run: start it again from scratch
                shutil.rmtree(folder / name, ignore_errors=True)
            folder.mkdir(parents=True, exist_ok=True)
            env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            with open(folder / "console.log", "a") as console:
                code = subprocess.call([*point.command(preset, todo, root), *extra],
                                       stdout=console, stderr=subprocess.STDOUT, env=env)
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

    def report(self, point: StudyPoint, names: Sequence[str], root: Path, outcome: str) -> None:
        with self.lock:  # points finish on several threads
            for name in names:
                self._line(point, name, root, outcome)

    def _line(self, point: StudyPoint, name: str, root: Path, outcome: str) -> None:
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


def run_tasks(tasks: list[tuple[StudyPoint, list[str]]], preset: str, root: Path, jobs: int,
                threads: int, extra: Sequence[str], counts: dict[str, int]) -> None:
    """Train each (point, attentions) task, `jobs` at a time, printing one line per run."""
    progress = Progress(sum(len(names) for _, names in tasks))

    def one(task: tuple[StudyPoint, list[str]]) -> None:
        point, names = task
        outcome = run_point(point, preset, root, names, threads, extra)
        counts[outcome] = counts.get(outcome, 0) + 1
        progress.report(point, names, root, outcome)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, tasks))


def _todo(points: Sequence[StudyPoint], root: Path, names: Sequence[str],
          archived: frozenset[str]) -> list[tuple[StudyPoint, list[str]]]:
    return [(point, left) for point in points if (left := missing(point, root, names, archived))]


def study_runs(root: Path, archived: pd.DataFrame | None) -> pd.DataFrame:
    """The finished runs: the study folder's and the archived ones."""
    if archived is None:
        return load_study([root])
    has_runs = root.is_dir() and any(root.rglob(SUMMARY_FILE))
    return combine(load_study([root]) if has_runs else None, archived)


def run_study(
    preset: str, root: Path, attentions: Sequence[str] | None = None, jobs: int = 2,
    threads: int = 1, extra: Sequence[str] = (), archived: pd.DataFrame | None = None,
) -> dict[str, int]:
    """Train every missing run of the study, `jobs` points at a time; a count per outcome.
    `archived`: finished runs from an earlier session (mqar_results.load_archive), not rerun.

    With the grid's lr_seed set: first every lr at that seed, then the other seeds at the lr
    chosen (on validation) per attention, short conv and width."""
    done = frozenset() if archived is None else frozenset(archived["run"])
    names = check_variant_names(attentions) if attentions else variant_names()
    grid = load_grid(preset, [o for o in extra if o.startswith("study.")])
    first_seeds = grid["seeds"] if grid["lr_seed"] is None else [grid["lr_seed"]]
    points = plan_points(grid, first_seeds)
    todo = _todo(points, root, names, done)
    print(f"{preset}: {len(points)} points x {len(names)} attentions (seeds {first_seeds}); "
          f"{sum(len(left) for _, left in todo)} runs to go, {jobs} points at a time; "
          f"per-run logs in {root}/<point>/console.log", flush=True)
    counts: dict[str, int] = {}
    run_tasks(todo, preset, root, jobs, threads, extra, counts)
    if grid["lr_seed"] is None:
        return counts
    later = _later_seed_tasks(grid, root, names, archived)
    print(f"{preset}: lr chosen on seed {grid['lr_seed']}; {sum(len(n) for _, n in later)} "
          "runs of the other seeds to go", flush=True)
    run_tasks(later, preset, root, jobs, threads, extra, counts)
    return counts


def _later_seed_tasks(
    grid: dict[str, Any], root: Path, names: Sequence[str], archived: pd.DataFrame | None = None,
) -> list[tuple[StudyPoint, list[str]]]:
    """The runs of the seeds after lr_seed: each (attention, short conv, width) at the lr its
    lr_seed runs chose, grouped into one task per point."""
    runs = study_runs(root, archived)
    done = frozenset(runs["run"])
    chosen = choose_lr(runs[runs["seed"] == grid["lr_seed"]])
    by_point: dict[StudyPoint, list[str]] = {}
    for (name, conv, width), lr in chosen.items():
        if name not in names:
            continue
        for seed in grid["seeds"]:
            if seed != grid["lr_seed"]:
                by_point.setdefault(StudyPoint(int(width), int(conv), float(lr), int(seed)),
                                    []).append(name)
    tasks = []
    for point, point_names in by_point.items():
        left = missing(point, root, point_names, done)
        if left:
            tasks.append((point, left))
    return tasks
