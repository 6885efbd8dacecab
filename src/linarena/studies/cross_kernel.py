"""The cross-kernel reproduction check: rerun a stated sample of a study's
published runs under other kernel paths and say, per point, whether the reruns' outcomes are
consistent with the published rate.

Sample (choose_sample), at each point's chosen lr (choose_lr on the lr seeds' runs, as the
study chose it): first every split point (0 < k < n, a seed succeeds when its test accuracy
reaches statistics.SUCCESS_THRESHOLD) with all its seeds; then the other points, nearest the
threshold first (the smallest |test accuracy - threshold| over the point's seeds; a diverged
seed is infinitely far; ties by attention, short conv, width), whole points, until the sample
holds at least `min_runs` runs. With `seeds` (e.g. 1-5 where split points have 10), only those
seeds of each chosen point are rerun: a study with many split points stays affordable. Nearest first
because there a small numerical difference is most likely to move a seed across the threshold.

Each rerun is the study's own train.py command for the run (study.StudyPoint.command, the
attentions sharing a point in one call, as the study launches them) under the environment of a
kernel path (KERNEL_PATHS), in <root>/<kernel path>/<point>/<attention>/, trained by the study's
runner (study.run_tasks: finished run folders are skipped, so the check resumes).

Consistency (points_table): `consistent` is Fisher's exact two-sided test of the published k/n
against the rerun k'/n', p >= 0.05. Fisher's test, not overlapping Wilson intervals, because it
is the exact test of "one success rate" for small counts, with a known level, and the one the
README's readings use to separate two points; two 95% intervals can overlap while the rates
differ at p < 0.05, so overlap is a rule of unknown level. Its limit, said in every verdict: at
3 seeds against 3 the smallest possible p is 0.10 (3/3 against 0/3), so no 3-seed point can be
inconsistent; `flipped`, the seeds whose rerun outcome differs from the published one (same
seed, same command), is the per-seed evidence of a kernel-dependent outcome (a
split point already has 10 seeds, so the check adds none).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.statistics import (
    ALPHA,
    SUCCESS_THRESHOLD,
    fisher_exact,
    point_statistics,
)
from linarena.studies.runs import GROUP, load_study
from linarena.studies.state_size import choose_lr, lr_basis
from linarena.studies.study import TRAIN_PY, StudyPoint, Task, group_tasks, pending, run_tasks
from linarena.system import REPO_ROOT, cpu_model
from linarena.training.summary import SUMMARY_FILE

MIN_RUNS = 24
# CPU seconds per run when the runs CSV has no duration_s: the state-size study's 396 runs took
# about 12-14 CPU-hours (conf/experiment/mqar_study_cpu.yaml), ~2 minutes each at 1 thread. The
# unvectorised `default` path may well be slower (not measured).
RUN_SECONDS = 120.0
# Reruns of a kernel path it takes to time that path against the published runs.
MIN_TIMED = 5
# What the report prints per kernel path: torch's CPU capability (or the GPU) under its env.
_PROBE = ("import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() "
          "else torch.backends.cpu.get_cpu_capability())")


@dataclasses.dataclass(frozen=True)
class KernelPath:
    """The environment and train.py overrides of one kernel path, and what they select."""

    env: Mapping[str, str]
    overrides: tuple[str, ...]
    about: str


# ATEN_CPU_CAPABILITY picks ATen's vectorised CPU kernels (default: none, plain C++ loops;
# avx2; avx512; never above what the CPU has). MKL_CBWR=COMPATIBLE makes MKL (the BLAS of the
# matmuls) take its conditional-numerical-reproducibility code path that gives the same bits on
# every x86 CPU. CUDA_VISIBLE_DEVICES= keeps a GPU machine on the CPU (trainer.accelerator is
# auto, as in the study). oneDNN's path is not pinned. The study itself ran on `native`.
_CPU = {"MKL_CBWR": "COMPATIBLE", "CUDA_VISIBLE_DEVICES": ""}
KERNEL_PATHS: dict[str, KernelPath] = {
    "default": KernelPath({"ATEN_CPU_CAPABILITY": "default", **_CPU}, (),
                          "ATen's unvectorised kernels, MKL's reproducible path"),
    "avx2": KernelPath({"ATEN_CPU_CAPABILITY": "avx2", **_CPU}, (),
                       "ATen's AVX2 kernels, MKL's reproducible path"),
    "avx512": KernelPath({"ATEN_CPU_CAPABILITY": "avx512", **_CPU}, (),
                         "ATen's AVX-512 kernels, MKL's reproducible path"),
    "native": KernelPath({"CUDA_VISIBLE_DEVICES": ""}, (),
                         "nothing pinned: the CPU's best path, as the study ran"),
    "cuda": KernelPath({}, ("trainer.accelerator=gpu", "trainer.precision=32-true"),
                       "the GPU, float32 as on the CPU (not bf16)"),
}
# One row of <out>/cross_kernel.csv per rerun.
RERUN_COLUMNS = (*GROUP, "lr", "seed", "run", "kernel_path", "kernel_env", "kernel",
                 "published_test_acc", "published_success", "published_commit",
                 "published_kernels",
                 "rerun_test_acc", "rerun_success", "rerun_commit", "rerun_duration_s", "cpu")


def parse_kernel_paths(text: str) -> list[str]:
    """`default,avx2` as names of KERNEL_PATHS; an unknown name is a one-line ValueError."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in KERNEL_PATHS]
    if unknown or not names:
        raise ValueError(f"--kernel-paths {text!r}: choose from {', '.join(KERNEL_PATHS)}")
    return names


def env_text(name: str) -> str:
    """The kernel path's environment as shell assignments, e.g. `ATEN_CPU_CAPABILITY=avx2 ...`."""
    return " ".join(f"{key}={shlex.quote(value) if value else ''}"
                    for key, value in KERNEL_PATHS[name].env.items())


def published_points(runs: pd.DataFrame, grid: dict[str, Any]) -> pd.DataFrame:
    """One row per (attention, short_conv, d_model) at its chosen lr (on the grid's lr seeds):
    n, k (successes), whether it is split (0 < k < n), and `nearest`, its seeds' smallest
    |test_acc - threshold|."""
    chosen = choose_lr(lr_basis(runs, grid))
    rows = []
    for key, lr in chosen.items():
        at_lr = runs[(runs[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)
                     & (runs["lr"] == lr)]
        stats = point_statistics(at_lr["test_acc"])
        distance = (at_lr["test_acc"] - SUCCESS_THRESHOLD).abs().fillna(math.inf)
        rows.append({**dict(zip(GROUP, key, strict=True)), "lr": lr, "n": stats["n_seeds"],
                     "k": stats["successes"], "nearest": float(distance.min())})
    points = pd.DataFrame(rows, columns=[*GROUP, "lr", "n", "k", "nearest"])
    return points.assign(split=(points["k"] > 0) & (points["k"] < points["n"]))


def choose_sample(runs: pd.DataFrame, grid: dict[str, Any], min_runs: int = MIN_RUNS,
                  seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """The published runs to rerun (module docstring: every split point, then the points
    nearest the threshold, whole, until >= min_runs runs), with a `reason` column; with
    `seeds`, only those seeds of each point (which points are split is still read from all)."""
    points = published_points(runs, grid)
    ordered = pd.concat([
        points[points["split"]].sort_values(GROUP).assign(reason="split point"),
        points[~points["split"]].sort_values(["nearest", *GROUP])
        .assign(reason="nearest the threshold")])
    if seeds is not None:
        runs = runs[runs["seed"].isin(seeds)]
    sampled = runs.groupby([*GROUP, "lr"]).size()
    chosen, total = [], 0
    for point in ordered.itertuples(index=False):
        if point.reason != "split point" and total >= min_runs:
            break
        chosen.append(point._asdict())
        total += int(sampled.get((point.attention, point.short_conv, point.d_model, point.lr), 0))
    keys = pd.DataFrame(chosen, columns=[*GROUP, "lr", "reason"])[[*GROUP, "lr", "reason"]]
    sample = runs.merge(keys, on=[*GROUP, "lr"], how="inner")
    order = {tuple(row): index for index, row in enumerate(keys[GROUP].itertuples(index=False))}
    rank = [order[tuple(row)] for row in sample[GROUP].itertuples(index=False)]
    return sample.assign(_rank=rank).sort_values(["_rank", "seed"]).drop(columns="_rank") \
        .reset_index(drop=True)


def grid_lr(lr: float, lrs: Sequence[float]) -> float:
    """The preset's lr that a CSV's `lr` was written from (the command must use the study's
    own float, not the CSV's rounding of it)."""
    for candidate in lrs:
        if math.isclose(lr, float(candidate), rel_tol=1e-6):
            return float(candidate)
    raise ValueError(f"lr {lr}: not one of the preset's study.lrs {list(lrs)}; is the runs "
                     "CSV from this --preset?")


def sample_tasks(sample: pd.DataFrame, lrs: Sequence[float]) -> list[Task]:
    """The sample as the study's tasks: one train.py -m call per point and seed."""
    return group_tasks((StudyPoint(int(row.d_model), int(row.short_conv), grid_lr(row.lr, lrs),
                                   int(row.seed)), str(row.attention))
                       for row in sample.itertuples(index=False))


def shown_commands(tasks: Sequence[Task], preset: str, root: Path, paths: Sequence[str],
                   threads: int, extra: Sequence[str],
                   entries: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Each training command as a shell line: the kernel path's env, the threads run_point
    sets, `python train.py ...` (paths relative to the repository where inside it)."""
    lines = []
    for name in paths:
        folder = root / name
        for point, names in tasks:
            for command in point.commands(preset, names, folder, entries):
                args = [*command[2:], *extra, *KERNEL_PATHS[name].overrides]
                args = [arg.replace(f"{REPO_ROOT}/", "") for arg in args]
                lines.append(f"{env_text(name)} OMP_NUM_THREADS={threads} "
                             f"MKL_NUM_THREADS={threads} python "
                             f"{TRAIN_PY.relative_to(REPO_ROOT)} {shlex.join(args)}".strip())
    return lines


def run_check(tasks: list[Task], preset: str, root: Path, paths: Sequence[str], jobs: int,
              threads: int, extra: Sequence[str], archived: pd.DataFrame | None,
              entries: Mapping[str, Sequence[str]] | None = None) -> dict[str, int]:
    """Train each kernel path's reruns not finished under <root>/<path> nor in `archived` (a
    cross_kernel.csv written before); a count per outcome of study.run_point."""
    counts: dict[str, int] = {}
    for name in paths:
        done = frozenset() if archived is None else frozenset(
            archived.loc[archived["kernel_path"] == name, "run"])
        todo = pending(tasks, root / name, done)
        print(f"kernel path {name} ({env_text(name)}): {sum(len(n) for _, n in todo)} runs to "
              f"go, {jobs} points at a time", flush=True)
        run_tasks(todo, preset, root / name, jobs, threads,
                  [*extra, *KERNEL_PATHS[name].overrides], counts, KERNEL_PATHS[name].env,
                  entries)
    return counts


def probe(name: str) -> str:
    """What torch runs on under the kernel path's env here: its CPU capability or the GPU."""
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          env=os.environ | dict(KERNEL_PATHS[name].env), check=False)
    return done.stdout.strip() or f"unknown ({done.stderr.strip().splitlines()[-1:]})"


def load_resume(path: Path) -> pd.DataFrame:
    """The rows of a cross_kernel.csv written before (checked: result_files.read_csv_checked)."""
    return read_csv_checked(path, required_columns=RERUN_COLUMNS,
                            numeric_columns=("short_conv", "d_model", "lr", "seed",
                                             "published_test_acc", "rerun_test_acc"),
                            filled_columns=("run", "kernel_path"))


def rerun_rows(sample: pd.DataFrame, root: Path, paths: Sequence[str],
               archived: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row (RERUN_COLUMNS) per finished rerun of the sample: from <root>/<path>'s run
    folders (this machine's CPU model and probe), else from `archived` (its own columns)."""
    by_run = sample.set_index("run")
    rows = []
    for name in paths:
        folder = root / name
        found = (load_study([folder]) if folder.is_dir() and any(folder.rglob(SUMMARY_FILE))
                 else pd.DataFrame(columns=["run"]))
        found = found[found["run"].isin(by_run.index)]
        kernel = probe(name) if len(found) else ""
        for rerun in found.itertuples(index=False):
            published = by_run.loc[rerun.run]
            rows.append({
                **{column: published[column] for column in (*GROUP, "lr", "seed")},
                "run": rerun.run, "kernel_path": name, "kernel_env": env_text(name),
                "kernel": kernel, "published_test_acc": published["test_acc"],
                "published_commit": published["commit"],
                "published_kernels": published.get("cpu_kernels", ""),
                "rerun_test_acc": rerun.test_acc,
                "rerun_commit": rerun.commit, "rerun_duration_s": rerun.duration_s,
                "cpu": cpu_model()})
        if archived is not None:
            kept = archived[(archived["kernel_path"] == name) & archived["run"].isin(by_run.index)
                            & ~archived["run"].isin(found["run"])]
            rows.extend(kept.to_dict("records"))
    table = pd.DataFrame(rows, columns=RERUN_COLUMNS)
    for side in ("published", "rerun"):
        table[f"{side}_success"] = table[f"{side}_test_acc"].astype(float) >= SUCCESS_THRESHOLD
    order = {name: index for index, name in enumerate(paths)}
    return table.sort_values(["kernel_path", *GROUP, "seed"], key=lambda column: column.map(
        order) if column.name == "kernel_path" else column).reset_index(drop=True)


def verdict(published: dict, rerun: dict, p_value: float, flipped: int) -> str:
    """The point's one-line reading of its rerun."""
    counts = f"{rerun['successes']}/{rerun['n_seeds']} rerun vs {published['successes']}/" \
             f"{published['n_seeds']} published"
    if rerun["n_seeds"] < published["n_seeds"]:
        counts += f" (partial: {rerun['n_seeds']} of {published['n_seeds']} seeds rerun)"
    if p_value < ALPHA:
        return f"NOT consistent: {counts}, Fisher p = {p_value:.3f} < {ALPHA}"
    seeds = f"{flipped} seed{'s' if flipped != 1 else ''} changed outcome"
    if flipped:
        return (f"consistent ({counts}, Fisher p = {p_value:.2f}), but {seeds}: the outcome "
                "depends on the kernel path")
    return f"reproduced: {counts}, no seed changed outcome (Fisher p = {p_value:.2f})"


def points_table(sample: pd.DataFrame, reruns: pd.DataFrame, paths: Sequence[str]
                 ) -> pd.DataFrame:
    """Per sampled point and kernel path: published and rerun k/n with 95% Wilson intervals,
    Fisher's p, `consistent` (p >= ALPHA), `flipped` seeds and the verdict (module docstring)."""
    rows = []
    for key, published_runs in sample.groupby([*GROUP, "lr"], sort=False):
        published = point_statistics(published_runs["test_acc"])
        for name in paths:
            mine = reruns[(reruns["kernel_path"] == name)
                          & (reruns[[*GROUP, "lr"]] == pd.Series(key, index=[*GROUP, "lr"]))
                          .all(axis=1)]
            row = {**dict(zip([*GROUP, "lr"], key, strict=True)), "kernel_path": name,
                   "published_n": published["n_seeds"], "published_k": published["successes"],
                   "published_ci_low": published["success_ci_low"],
                   "published_ci_high": published["success_ci_high"]}
            if not len(mine):
                rows.append(row | {"verdict": "not rerun yet"})
                continue
            rerun = point_statistics(mine["rerun_test_acc"].astype(float))
            p_value = fisher_exact(published["successes"], published["n_seeds"],
                                   rerun["successes"], rerun["n_seeds"])
            flipped = int((mine["rerun_success"] != mine["published_success"]).sum())
            rows.append(row | {
                "rerun_n": rerun["n_seeds"], "rerun_k": rerun["successes"],
                "rerun_ci_low": rerun["success_ci_low"], "rerun_ci_high": rerun["success_ci_high"],
                "fisher_p": p_value, "consistent": p_value >= ALPHA, "flipped": flipped,
                "verdict": verdict(published, rerun, p_value, flipped)})
    return pd.DataFrame(rows, columns=[
        *GROUP, "lr", "kernel_path", "published_n", "published_k", "published_ci_low",
        "published_ci_high", "rerun_n", "rerun_k", "rerun_ci_low", "rerun_ci_high", "fisher_p",
        "consistent", "flipped", "verdict"])


def estimate_cpu_seconds(sample: pd.DataFrame, paths: Sequence[str],
                         archived: pd.DataFrame | None = None) -> tuple[float, str]:
    """The CPU time of the whole check and how it was estimated: the published runs'
    duration_s where the CSV has it, else RUN_SECONDS per run, for each kernel path; a path
    with at least MIN_TIMED reruns in `archived` (load_resume's rows) scaled by their median
    rerun_duration_s / published duration_s (the unvectorised path runs slower)."""
    durations = sample["duration_s"] if "duration_s" in sample else pd.Series(dtype=float)
    known = int(durations.notna().sum())
    per_path = float(durations.sum()) + (len(sample) - known) * RUN_SECONDS
    how = (f"{known} runs from the CSV's duration_s, {len(sample) - known} at {RUN_SECONDS:.0f} s "
           f"(the study's 12-14 CPU-hours / 396 runs), for each of {len(paths)} kernel paths")
    published = durations.set_axis(sample["run"]) if known else pd.Series(dtype=float)
    total = 0.0
    for name in paths:
        timed = (pd.DataFrame() if archived is None else
                 archived[archived["kernel_path"] == name])
        ratio = (timed["rerun_duration_s"].astype(float).to_numpy()
                 / timed["run"].map(published).to_numpy()) if len(timed) else []
        ratio = pd.Series(ratio, dtype=float).dropna()
        factor = float(ratio.median()) if len(ratio) >= MIN_TIMED else 1.0
        if len(ratio) >= MIN_TIMED:
            how += f"; {name} x {factor:.2f}, the median over its {len(ratio)} reruns so far"
        total += per_path * factor
    return total, how
