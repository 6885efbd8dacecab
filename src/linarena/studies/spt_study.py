"""The self-pretraining studies as commands (scripts/study.py spt_listops, spt_pathfinder):
their declarations, and how their plan reads on the console. The protocol is spt's, the
finished runs spt_runs', the time left spt_plan's, the report's tables, caption and figure
spt_report's.

    python scripts/study.py spt_listops --plan
    nohup python scripts/study.py spt_listops --jobs 1 --threads 1 \\
        --resume-from docs/results/spt_listops_runs.csv --out docs/results &
    python scripts/study.py spt_pathfinder --jobs 1 --threads 1 --out docs/results
"""

from __future__ import annotations

import argparse

import pandas as pd

from linarena.attention.variants import check_variant_names
from linarena.studies.cli import add_attention_argument
from linarena.studies.declaration import Report, Study
from linarena.studies.spt import ARMS, load_protocol
from linarena.studies.spt_baseline import masked_token_baselines
from linarena.studies.spt_plan import plan_table, published_calibration
from linarena.studies.spt_report import study_report
from linarena.studies.spt_runs import (
    PUBLISHED,
    Loaded,
    combined_runs,
    load_archive,
    published_scratch,
    seed_tasks,
    split_attentions,
)
from linarena.studies.study import pending, run_tasks


def load(args: argparse.Namespace) -> Loaded:
    """The protocol (preset, overrides), the attentions (--attention, else the block's), the
    published scratch rows and the runs --resume-from archives."""
    protocol = load_protocol(args.preset, args.overrides)
    names = check_variant_names(args.attention) if args.attention else list(protocol.attentions)
    archived = None if args.resume_from is None else load_archive(args.resume_from, protocol)
    if archived is not None:
        print(f"{args.resume_from}: {len(archived)} runs of this study count as finished",
              flush=True)
    return Loaded(protocol, names, published_scratch(protocol, names), archived)


def run(args: argparse.Namespace, loaded: Loaded) -> dict[str, int]:
    """Train what is left: the study's seeds, then more seeds for the attentions that split."""
    counts: dict[str, int] = {}
    protocol = loaded.protocol
    todo = pending(seed_tasks(loaded, protocol.seeds, loaded.names, args.overrides), args.root,
                   loaded.archived_ids)
    print(f"experiment={args.preset}: {len(loaded.names)} attentions x {len(ARMS)} arms x "
          f"seeds {list(protocol.seeds)}: {sum(len(n) for _, n in todo)} runs to go", flush=True)
    run_tasks(todo, args.preset, args.root, args.jobs, args.threads, (), counts)
    if protocol.more_seeds and protocol.threshold is not None:
        split = split_attentions(combined_runs(args.root, loaded), protocol, loaded.names)
        more = pending(seed_tasks(loaded, protocol.more_seeds, split, args.overrides),
                       args.root, loaded.archived_ids)
        print(f"split at {protocol.threshold:g}: {split or 'none'}; "
              f"{sum(len(n) for _, n in more)} runs of more seeds to go", flush=True)
        run_tasks(more, args.preset, args.root, args.jobs, args.threads, (), counts)
    return counts


def plan(args: argparse.Namespace, loaded: Loaded) -> None:
    """Print the runs left per arm and their CPU-hours (each run on --threads threads)."""
    table = plan_table(args.root, loaded, args.overrides)
    runs = combined_runs(args.root, loaded)
    print(f"experiment={args.preset}: {len(runs)} runs finished (published scratch rows "
          f"included) in {args.root}" + (f" and {args.resume_from}" if args.resume_from else ""))
    if (runs["origin"] == PUBLISHED).any():
        print(f"a published run's seconds per step count x{published_calibration(runs):.2f} "
              "(this study's runs against the published runs of their attention)")
    for arm in ARMS:
        rows = table[table["arm"] == arm]
        if not len(rows):
            print(f"{arm}: nothing left")
            continue
        exact = rows[rows["exact"]]
        count = f"{len(exact)} runs" + (f" (+ at most {len(rows) - len(exact)} more seeds)"
                                        if len(rows) > len(exact) else "")
        print(f"{arm} ({loaded.protocol.arm_words(arm)}): {count}, "
              f"{_hours(rows['seconds'], args.threads)}")
    exact = table[table["exact"]]
    more = (f" (at most {len(table)} runs, {_hours(table['seconds'], args.threads)}, with the "
            "more seeds)" if len(table) > len(exact) else "")
    wall = exact["seconds"].sum() / 3600 / args.jobs
    print(f"left: {len(exact)} runs, {_hours(exact['seconds'], args.threads)}{more}; "
          + (f"about {wall:.1f} hours at --jobs {args.jobs} --threads {args.threads} "
             if exact["seconds"].notna().any() else "")
          + "(durations of comparable finished runs, scaled by steps; a busy machine is "
          "slower)")


def _hours(seconds: pd.Series, threads: int) -> str:
    """'about 9.1 CPU-hours' of runs taking `seconds` each on `threads` threads, saying how
    many runs no comparable run times."""
    unknown = int(seconds.isna().sum())
    if unknown == len(seconds):
        return "CPU-hours not known yet (no comparable run has finished)"
    return (f"about {seconds.sum() * threads / 3600:.1f} CPU-hours"
            + (f" ({unknown} runs without a comparable run, not counted)" if unknown else ""))


def collect(args: argparse.Namespace, loaded: Loaded) -> pd.DataFrame:
    """Every finished run the report reads (spt_runs.combined_runs); none is an error."""
    runs = combined_runs(args.root, loaded)
    if not len(runs):
        raise FileNotFoundError(f"no finished run in {args.root}, nor archived, nor published: "
                                "train first")
    return runs


def report(args: argparse.Namespace, loaded: Loaded, runs: pd.DataFrame) -> Report:
    """<name>_runs.csv, <name>.csv (per arm and attention), <name>_pairs.csv,
    <name>_spread.csv, <name>_verdicts.csv, <name>.md, <name>.png and
    <name>_masked_baseline.csv (spt_report); PARTIAL while runs are missing."""
    protocol = loaded.protocol
    baseline = masked_token_baselines(protocol.preset, args.overrides, protocol.mask_fraction,
                                      protocol.seeds)
    return study_report(args.name, loaded.protocol, loaded.names, runs, baseline)


HELP = {
    "--plan": "print the runs left per arm with the CPU-hours they take (from the durations "
              "of comparable finished runs); train nothing",
    "--resume-from": "a runs CSV this study wrote (<name>_runs.csv): the runs it trained count "
                     "as finished and go into the report",
    "overrides": "train.py overrides for every run (study.* ones change the grid, e.g. "
                 "study.seeds=[1,2])",
}

SPT_LISTOPS = Study(
    name="spt_listops",
    description="Self-pretraining on ListOps: every attention with SPT against the published "
                "from-scratch sweep (equal fine-tuning steps) and from scratch at equal total "
                "steps; resumable",
    load=load, run=run, plan=plan, collect=collect, report=report,
    preset="spt/listops_small", root="spt_listops", output="spt_listops",
    add_arguments=add_attention_argument, help=HELP,
)

SPT_PATHFINDER = Study(
    name="spt_pathfinder",
    description="Self-pretraining on Pathfinder-32 (generated): six attentions from scratch "
                "and with SPT, more seeds where the outcomes split; resumable",
    load=load, run=run, plan=plan, collect=collect, report=report,
    preset="spt/pathfinder_small", root="spt_pathfinder", output="spt_pathfinder",
    add_arguments=add_attention_argument, help=HELP,
)
