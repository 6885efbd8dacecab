"""The MQAR mixture as a study: every attention of conf/attention/ with
each kind of positions of the preset's `study:` block (e.g. none and rope: where does length
generalisation appear without absolute position codes?), over its seeds, trained by the study
runner (study.run_tasks: resumable, a folder per run, <root>/<positions>_seed<s>/<attention>/),
reported by studies.mixture.

Seeds: the grid's `seeds` first; an (attention, positions) whose seeds split at some test
setting (some reach SUCCESS_THRESHOLD and some do not) gets the grid's `more_seeds` too. A layer
with its own short convolutions runs with model.short_conv=0 (the preset's conv would be a
second one, which the model refuses).

A study that spans machines or sessions resumes from the runs CSV it committed
(mqar_mixture_runs.csv, load_archive): its runs count as finished, and the report is written
from them and the run folders (mixture_runs), as the state-size study does (runs.load_archive).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from linarena.analysis.provenance import training_note
from linarena.analysis.result_files import read_csv_checked
from linarena.attention.variants import check_variant_names, owns_short_conv, variant_names
from linarena.studies.cli import add_attention_argument
from linarena.studies.declaration import Report, Study
from linarena.studies.mixture import (
    CAPTION_ON,
    POOLED_ON,
    RUN_COLUMNS,
    load_runs,
    sort_runs,
    summarize,
    wanted_seeds,
)
from linarena.studies.mixture_report import accuracy_table, caption
from linarena.studies.preset import compose_preset
from linarena.studies.runs import train_overrides
from linarena.studies.study import SettingsPoint, Task, group_tasks, pending, run_tasks
from linarena.training.summary import SUMMARY_FILE


@dataclasses.dataclass(frozen=True)
class MixturePoint(SettingsPoint):
    """One (positions, seed) of the mixture: the attentions there are trained together."""

    positions: str
    seed: int

    @property
    def folder_name(self) -> str:
        return f"{self.positions}_seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [f"model.positions={self.positions}", f"seed={self.seed}"]


def load_mixture_grid(preset: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The `study:` block of a mixture preset: positions and seeds (lists), more_seeds."""
    cfg = compose_preset(preset, overrides)
    study = cfg.get("study")
    if study is None or not study.get("positions") or not study.get("seeds"):
        raise ValueError(f"experiment={preset} has no `study:` block with positions and seeds; "
                         "use a mixture preset such as mqar_mixture_cpu")
    grid = {"positions": [str(p) for p in study.positions], "seeds": list(study.seeds),
            "more_seeds": list(study.get("more_seeds") or [])}
    if set(grid["more_seeds"]) & set(grid["seeds"]):
        raise ValueError(f"experiment={preset}: study.more_seeds={grid['more_seeds']} repeats "
                         f"seeds of study.seeds {grid['seeds']}; list new seeds only")
    return grid


def own_conv_entries(names: Sequence[str]) -> dict[str, list[str]]:
    """The layers that own their short convolutions, each run with model.short_conv=0."""
    return {name: ["model.short_conv=0"] for name in names if owns_short_conv(name)}


def study_overrides(preset: str, attention: str, positions: str, seed: int,
                    extra: Sequence[str] = ()) -> list[str]:
    """The train.py overrides this study trains one run with (its Hydra overrides, as the runs
    CSV's `command` column records them), sorted."""
    conv = ["model.short_conv=0"] if owns_short_conv(attention) else []
    return sorted([f"experiment={preset}", f"attention={attention}",
                   f"model.positions={positions}", f"seed={seed}", "logger=none", *conv,
                   *extra])


def load_archive(path: Path, preset: str, extra: Sequence[str] = ()) -> pd.DataFrame:
    """The rows of a runs CSV this study wrote before (<name>_runs.csv), as load_runs gives
    them, to count as finished runs. Each run must have been trained by the command this study
    gives it (study_overrides): then it shares the preset's mixture and settings with every
    run pooled beside it. A damaged file is a ResultFileError naming the line."""
    extra = [o for o in extra if not o.startswith("study.")]
    runs = read_csv_checked(
        path, required_columns=RUN_COLUMNS,
        numeric_columns=("short_conv", "seed", "length", "pairs", "acc", "duration_s"),
        filled_columns=("attention", "positions", "seed", "length", "pairs", "run", "command"))
    for row in runs.drop_duplicates("run").itertuples():
        wanted = study_overrides(preset, row.attention, str(row.positions), int(row.seed), extra)
        if sorted(train_overrides(row.command)) != wanted:
            raise ValueError(
                f"{path}: run {row.run} was trained by `{row.command}`, not by this study's "
                f"command for it (train.py {' '.join(wanted)}): it belongs to another preset or "
                "settings; resume from that study's CSV or none")
    return runs.astype({"seed": int, "length": int, "pairs": int, "positions": str})


def report_config(preset: str, extra: Sequence[str] = ()) -> dict[str, Any]:
    """What the report reads of a run's config (POOLED_ON, CAPTION_ON), from the preset with
    `extra`, as nested plain values like summary.json's "config"."""
    cfg = compose_preset(preset, extra)
    config: dict[str, Any] = {}
    for dotted in (*POOLED_ON, *CAPTION_ON):
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        value = OmegaConf.select(cfg, dotted)
        node[leaf] = OmegaConf.to_container(value, resolve=True) \
            if OmegaConf.is_config(value) else value
    return config


def mixture_runs(root: Path, preset: str, archived: pd.DataFrame | None,
                 extra: Sequence[str] = ()) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The finished runs (load_runs' rows): the run folders under `root` and the archived runs
    none of them reruns (a run's folder wins); and the config they share: the first run
    folder's, or with an archive the preset's resolved config, which every folder must match."""
    if archived is None:
        return load_runs([root])
    config = report_config(preset, extra)
    if not (root.is_dir() and any(root.rglob(SUMMARY_FILE))):
        return archived.reset_index(drop=True), config
    runs, _ = load_runs([root], reference=config)
    kept = archived[~archived["run"].isin(runs["run"])]
    return sort_runs(pd.concat([kept, runs], ignore_index=True)), config


def run_mixture(preset: str, root: Path, attentions: Sequence[str] | None = None,
                jobs: int = 2, threads: int = 1, extra: Sequence[str] = (),
                archived: pd.DataFrame | None = None) -> dict[str, int]:
    """Train every missing run of the mixture study (neither in a folder under `root` nor in
    `archived`, load_archive's rows), `jobs` points at a time: the grid's seeds, then
    more_seeds where they split; a count per outcome."""
    grid = load_mixture_grid(preset, [o for o in extra if o.startswith("study.")])
    extra = [o for o in extra if not o.startswith("study.")]
    names = check_variant_names(attentions) if attentions else variant_names()
    entries = own_conv_entries(names)
    counts: dict[str, int] = {}
    done = frozenset(() if archived is None else archived["run"])
    tasks: list[Task] = [(MixturePoint(positions, seed), list(names))
                         for seed in grid["seeds"] for positions in grid["positions"]]
    todo = pending(tasks, root, done)
    print(f"{preset}: {len(names)} attentions x positions {grid['positions']} x seeds "
          f"{grid['seeds']}: {sum(len(n) for _, n in todo)} runs to go", flush=True)
    run_tasks(todo, preset, root, jobs, threads, extra, counts, entries=entries)
    if grid["more_seeds"] and (done or any(root.rglob(SUMMARY_FILE))):
        wanted = wanted_seeds(mixture_runs(root, preset, archived, extra)[0], names, grid)
        split = sorted(row for row, seeds in wanted.items() if len(seeds) > len(grid["seeds"]))
        more = pending(group_tasks((MixturePoint(positions, seed), attention)
                                   for seed in grid["more_seeds"]
                                   for attention, positions in split), root, done)
        print(f"{preset}: {len(split)} (attention, positions) split; "
              f"{sum(len(n) for _, n in more)} runs of more seeds to go", flush=True)
        run_tasks(more, preset, root, jobs, threads, extra, counts, entries=entries)
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--attention, and --runs: the folders a report reads instead of --root."""
    add_attention_argument(parser)
    parser.add_argument("--runs", type=Path, nargs="+", default=None,
                        help="folders searched for the runs' summary.json (recursively; "
                             "default: --root)")


def load(args: argparse.Namespace) -> pd.DataFrame | None:
    """The runs archived by --resume-from (None without it)."""
    if args.resume_from is not None and args.runs is not None:
        raise ValueError("--resume-from reads the runs of --root beside the archived ones; "
                         "give --root, not --runs")
    return None if args.resume_from is None else \
        load_archive(args.resume_from, args.preset, args.overrides)


def run(args: argparse.Namespace, archived: pd.DataFrame | None) -> dict[str, int]:
    return run_mixture(args.preset, args.root, args.attention, args.jobs, args.threads,
                       args.overrides, archived)


def collect(args: argparse.Namespace, archived: pd.DataFrame | None
            ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The runs (a row per run and test setting) and the config they share."""
    if archived is None:
        return load_runs(args.runs or [args.root])
    return mixture_runs(args.root, args.preset, archived, args.overrides)


def report(args: argparse.Namespace, archived: pd.DataFrame | None,
           collected: tuple[pd.DataFrame, dict[str, Any]]) -> Report:
    """<name>_runs.csv, <name>.csv (per attention, positions and setting) and <name>.md, into
    the first --runs folder without --out."""
    runs, config = collected
    summary = summarize(runs)
    table = accuracy_table(summary)
    count = len(runs.drop_duplicates(["attention", "positions", "seed"]))
    return Report({
        "_runs.csv": runs, ".csv": summary,
        ".md": caption(runs, config) + training_note(runs, f"{args.name}_runs.csv") + table,
    }, lambda paths: table + f"{count} runs -> {', '.join(map(str, paths))}",
        folder=(args.runs or [args.root])[0])


MIXTURE = Study(
    name="mixture",
    description="MQAR mixture: train every attention with each kind of positions over seeds, "
                "then report accuracy per test setting",
    load=load, run=run, collect=collect, report=report, add_arguments=add_arguments,
    preset="mqar_mixture_cpu", root="mqar_mixture", output="mqar_mixture",
    script="scripts/mqar_mixture.py",
    help={"--preset": "a mixture preset with a study: block (positions, seeds)",
          "--resume-from": "a runs CSV this study wrote before (<name>_runs.csv): its runs "
                           "count as finished and are reported beside --root's",
          "--out": "the first --runs"},
)
