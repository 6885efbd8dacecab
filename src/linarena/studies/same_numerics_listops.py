"""The entries of scripts/maintainer/same_numerics.py's ListOps protocols: the runs a ListOps
study compares with rows trained at other commits, as those rows were trained, cut to a few
steps (the script appends trainer.max_steps=<--steps> to each command).

- The published small-budget ListOps sweep (docs/results/results_runs.csv, task listops_small,
  300 steps; seed_sweep's LISTOPS_OVERRIDES and LISTOPS_THREADS): every variant of
  conf/attention/ with rows there, the default config as scripts/seed_sweep.py trains it, a
  process per run, two threads a run (the threads the rows were trained with: the bits depend
  on them).
- A self-pretraining preset (spt/listops_small; studies.spt): the spt arm of every attention
  of its study block, both stages cut to --steps (pretrain.max_steps too, so the fine-tuning
  still starts from pretrained weights), one thread a run as the study trains them (`--threads
  1`); the weights compared are the fine-tuning stage's, <run>/finetune/checkpoints/last.ckpt.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.analysis.runs_archive import load_runs_csv
from linarena.attention.variants import check_variant_names, variant_names
from linarena.studies.preset import compose_preset, sweep_protocol
from linarena.studies.seed_sweep import LISTOPS_OVERRIDES, LISTOPS_THREADS, SweepPoint
from linarena.studies.spt import SPT, ArmPoint, load_protocol, override_key
from linarena.training.pretrain_config import FINETUNE

# One entry to compare: its CSV row's identifying columns (with "attention", the variant or
# hybrid trained, and "threads", the threads a run trains on), its train.py command and the
# folder under which its final last.ckpt is written.
Check = tuple[dict[str, Any], list[str], Path]

PUBLISHED_RUNS = PUBLISHED_DIR / "results_runs.csv"
# The overrides the check sets itself: the sweep's own step budget is replaced by --steps.
CUT = ("trainer.max_steps",)


def published_sweep_names(runs_csv: Path = PUBLISHED_RUNS) -> list[str]:
    """The variants of conf/attention/ with rows of the small-budget ListOps sweep (its task
    and steps) in `runs_csv`, in conf/attention/'s order."""
    task, steps = sweep_protocol(None, LISTOPS_OVERRIDES)
    published = {record.attention for record in load_runs_csv(runs_csv)
                 if (record.task, record.max_steps) == (task, steps)}
    return [name for name in variant_names() if name in published]


def settings(args: argparse.Namespace, preset: str | None) -> tuple[dict[str, Any], list[str]]:
    """The width and lr of the runs ({"d_model", "lr"}: --width and --lr, else the config's)
    and the overrides that set them where given."""
    cfg = compose_preset(preset)
    overrides = [*([f"model.d_model={args.width}"] if args.width is not None else []),
                 *([f"optim.lr={args.lr}"] if args.lr is not None else [])]
    return {"d_model": args.width or int(cfg.model.d_model),
            "lr": args.lr if args.lr is not None else float(cfg.optim.lr)}, overrides


def listops_sweep_checks(args: argparse.Namespace, folder: Path) -> list[Check]:
    """Every variant with published sweep rows (or --attention) at --seed, as the sweep trains
    it, each under `folder`/seed<s>/<variant>, LISTOPS_THREADS threads each."""
    names = check_variant_names(args.attention) if args.attention else published_sweep_names()
    shared, overrides = settings(args, None)
    kept = [o for o in LISTOPS_OVERRIDES if override_key(o) not in CUT]
    point = SweepPoint(args.seed)
    checks = []
    for name in names:
        command, = point.commands(None, [name], folder)
        checks.append(({"attention": name, **shared, "threads": LISTOPS_THREADS},
                       [*command, *kept, *overrides], folder / point.folder_name / name))
    return checks


def spt_checks(args: argparse.Namespace, folder: Path) -> list[Check]:
    """The spt arm of every attention of a self-pretraining preset's study block (or
    --attention) at --seed, both stages --steps long, each under
    `folder`/spt/seed<s>/<attention>, one thread each; the fine-tuning stage's weights."""
    protocol = load_protocol(args.preset)
    names = check_variant_names(args.attention) if args.attention else list(protocol.attentions)
    shared, overrides = settings(args, args.preset)
    point = ArmPoint(SPT, args.seed)
    checks = []
    for name in names:
        command, = point.commands(args.preset, [name], folder)
        checks.append(({"attention": name, **shared, "threads": 1},
                       [*command, f"pretrain.max_steps={args.steps}", *overrides],
                       folder / point.folder_name / name / FINETUNE))
    return checks
