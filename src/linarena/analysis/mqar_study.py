"""The MQAR state-size study: which runs it makes and how they are launched (issue 13).

A study preset (conf/experiment/mqar_study_*.yaml) holds the training settings and a `study:`
block with the grid: model widths, short-conv settings and learning rates. Every attention
variant of conf/attention/ is trained at every point of the grid: one `train.py -m` call per
point (one process start for all its attentions), a folder per run,
`<root>/d<width>_conv<k>_lr<lr>/<attention>/` (summary.json and .hydra/config.yaml there). A run
with a summary.json is skipped, so an interrupted study resumes where it stopped; a run folder
without one (a killed run) is started again from scratch.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from filelock import Timeout
from hydra import compose, initialize_config_dir

from linarena.attention.variants import CONF_DIR, check_variant_names, variant_names
from linarena.files import build_lock
from linarena.training.summary import SUMMARY_FILE

log = logging.getLogger(__name__)
TRAIN_PY = CONF_DIR.parent / "train.py"


@dataclasses.dataclass(frozen=True)
class StudyPoint:
    """One point of the grid: the attentions at it are trained by one `train.py -m` call."""

    d_model: int
    short_conv: int
    lr: float

    @property
    def folder_name(self) -> str:
        return f"d{self.d_model}_conv{self.short_conv}_lr{self.lr:.0e}"

    def command(self, preset: str, attentions: Sequence[str], root: Path) -> list[str]:
        """The train.py multirun over `attentions` at this point: one folder per attention,
        <root>/<folder_name>/<attention>/ (summary.json, .hydra/config.yaml)."""
        return [sys.executable, str(TRAIN_PY), "-m", f"experiment={preset}",
                f"attention={','.join(attentions)}", f"model.d_model={self.d_model}",
                f"model.short_conv={self.short_conv}", f"optim.lr={self.lr}", "logger=none",
                f"hydra.sweep.dir={root / self.folder_name}",
                "hydra.sweep.subdir=${hydra:runtime.choices.attention}"]


def load_grid(preset: str, conf_dir: Path = CONF_DIR) -> dict[str, list]:
    """The `study:` block of conf/experiment/<preset>.yaml: widths, short_conv and lrs lists."""
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={preset}"])
    if "study" not in cfg:
        raise ValueError(f"experiment={preset} has no `study:` block (widths, short_conv, lrs); "
                         "use a study preset such as mqar_study_cpu")
    grid = {key: list(cfg.study.get(key) or []) for key in ("widths", "short_conv", "lrs")}
    empty = [key for key, values in grid.items() if not values]
    if empty:
        raise ValueError(f"experiment={preset}: study.{empty[0]} is empty; list at least one value")
    return grid


def plan_points(grid: dict[str, list]) -> list[StudyPoint]:
    """Every (width, short_conv, lr) of the grid, ordered so that a partial study is as useful
    as possible: all points at the middle learning rate first, then the neighbouring ones;
    within one learning rate, short conv on first, then by width."""
    lrs = [float(lr) for lr in grid["lrs"]]
    middle = (len(lrs) - 1) / 2
    rank = {lr: abs(index - middle) for index, lr in enumerate(lrs)}
    points = [StudyPoint(int(width), int(conv), lr) for width, conv, lr
              in itertools.product(grid["widths"], grid["short_conv"], lrs)]
    return sorted(points, key=lambda p: (rank[p.lr], -p.short_conv, p.d_model))


def missing(point: StudyPoint, root: Path, attentions: Sequence[str]) -> list[str]:
    """The attentions at `point` without a summary.json yet."""
    folder = root / point.folder_name
    return [name for name in attentions if not (folder / name / SUMMARY_FILE).is_file()]


def run_point(
    point: StudyPoint, preset: str, root: Path, attentions: Sequence[str], threads: int,
    extra: Sequence[str] = (),
) -> str:
    """Train the unfinished attentions at `point` (one train.py -m call) unless another study
    process holds it. Returns "done", "busy", "ok" or "failed (exit N)"."""
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
            return "ok" if code == 0 and not left else f"failed (exit {code}, missing {left})"
    except Timeout:
        return "busy"


def run_study(
    preset: str, root: Path, attentions: Sequence[str] | None = None, jobs: int = 2,
    threads: int = 1, extra: Sequence[str] = (),
) -> dict[str, int]:
    """Train every missing run of the study, `jobs` points at a time; a count per outcome."""
    names = check_variant_names(attentions) if attentions else variant_names()
    points = plan_points(load_grid(preset))
    todo = [point for point in points if missing(point, root, names)]
    log.info("%s: %d points x %d attentions; %d points to go, %d at a time", preset,
             len(points), len(names), len(todo), jobs)
    counts: dict[str, int] = {}

    def one(point: StudyPoint) -> None:
        outcome = run_point(point, preset, root, names, threads, extra)
        counts[outcome] = counts.get(outcome, 0) + 1
        log.info("%s: %s", point.folder_name, outcome)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    return counts
