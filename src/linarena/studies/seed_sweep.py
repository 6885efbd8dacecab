"""A sweep over every attention and seed, with more seeds where the outcomes split (a result that
can go either way is a rate): the README's small-budget tables as a study, resumable.

Every attention is trained at each of `seeds` (a train.py process per run, so that its CPU peak
memory is its own; a folder per run, <root>/seed<s>/<attention>/); an attention whose seeds
split (some reach SUCCESS_THRESHOLD test accuracy and some do not) is trained at `more_seeds`
too, so an outcome that can go either way is a rate over enough seeds. All runs are one sweep for
scripts/compare.py: its multirun folder is <root> (study.train_commands' sweep_dir), whatever the
seed folder. A sweep that spans sessions or machines resumes from the runs CSV compare.py wrote of
it (`archived_runs`): the runs listed there count as finished.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from linarena.analysis.bench_args import non_negative_int
from linarena.analysis.runs import RunRecord
from linarena.analysis.runs_archive import load_runs_csv
from linarena.analysis.statistics import SUCCESS_THRESHOLD
from linarena.attention.variants import check_variant_names, variant_names
from linarena.metrics import TEST_ACC
from linarena.studies.cli import add_attention_argument
from linarena.studies.declaration import Study
from linarena.studies.preset import sweep_protocol
from linarena.studies.study import SettingsPoint, Task, pending, run_tasks, train_commands
from linarena.training.summary import read_summary

# The published small-budget ListOps sweep (README; docs/results/results_runs.csv): its steps
# and each run's threads. The report card's ListOps section and the same-numerics check train
# runs comparable with its rows.
LISTOPS_OVERRIDES = ("trainer.max_steps=300",)
LISTOPS_THREADS = 2
# A finished run's test accuracy by (seed, attention folder); None: it diverged.
Archive = Mapping[tuple[int, str], float | None]


@dataclasses.dataclass(frozen=True)
class SweepPoint(SettingsPoint):
    """One seed of the sweep: every attention at it, each in its own train.py process."""

    seed: int

    @property
    def folder_name(self) -> str:
        return f"seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [f"seed={self.seed}"]

    def commands(self, preset: str | None, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]:
        """train_commands into <root>/seed<s>/<name>/, labelled as the one sweep <root>, a
        process per run: the sweep publishes each run's peak memory."""
        return train_commands(preset, self.settings, names, root / self.folder_name, entries,
                              sweep_dir=root, process_per_run=True)


def archived_runs(records: Iterable[RunRecord], root: Path, task: str,
                  max_steps: int) -> dict[tuple[int, str], float | None]:
    """The runs of the sweep in `root` among `records` (a runs CSV, runs_archive.load_runs_csv):
    those whose summary.json was <...>/<root's name>/seed<s>/<attention>/, as
    {(seed, attention): test accuracy, None where it diverged}. Such a run trained with another
    task or step budget belongs to another sweep: a ValueError."""
    found: dict[tuple[int, str], float | None] = {}
    for record in records:
        folder = Path(record.source).parent
        if (folder.parent.parent.name, folder.parent.name) != (
                root.name, SweepPoint(record.seed).folder_name):
            continue
        if (record.task, record.max_steps) != (task, max_steps):
            raise ValueError(
                f"archived run {record.source} has task {record.task}, max_steps "
                f"{record.max_steps}, but the sweep in {root} trains task {task}, max_steps "
                f"{max_steps}: it belongs to another sweep; resume from this sweep's runs CSV "
                "or from none")
        found[(record.seed, folder.name)] = record.metrics.get(TEST_ACC.key)
    return found


def finished_accuracy(root: Path, seed: int, attention: str,
                      archived: Archive | None = None) -> float | None:
    """The test accuracy of a finished run, from its folder, else from `archived` (None: not
    finished, diverged or no test)."""
    summary = read_summary(root / SweepPoint(seed).folder_name / attention)
    if summary is None:
        return (archived or {}).get((seed, attention))
    return summary.get("metrics", {}).get(TEST_ACC.key)


def split_attentions(root: Path, names: Sequence[str], seeds: Sequence[int],
                     archived: Archive | None = None) -> list[str]:
    """The attentions of `names` whose finished runs at `seeds` split: 0 < successes < n."""
    split = []
    for name in names:
        finished = [acc for seed in seeds
                    if (acc := finished_accuracy(root, seed, name, archived)) is not None]
        successes = sum(acc >= SUCCESS_THRESHOLD for acc in finished)
        if 0 < successes < len(finished):
            split.append(name)
    return split


def run_sweep(preset: str | None, root: Path, names: Sequence[str], seeds: Sequence[int],
              more_seeds: Sequence[int] = (), jobs: int = 2, threads: int = 1,
              extra: Sequence[str] = (), archived: Archive | None = None) -> dict[str, int]:
    """Train every missing run of the sweep (`seeds`, then `more_seeds` for the attentions that
    split), `jobs` seeds at a time, the runs in `archived` (archived_runs) counting as finished;
    a count per outcome (study.run_point's)."""
    counts: dict[str, int] = {}
    done = frozenset(f"{SweepPoint(seed).folder_name}/{name}" for seed, name in archived or {})
    todo: list[Task] = pending([(SweepPoint(seed), list(names)) for seed in seeds], root, done)
    print(f"{preset or 'default config'}: {len(names)} attentions x seeds {list(seeds)}: "
          f"{sum(len(n) for _, n in todo)} runs to go", flush=True)
    run_tasks(todo, preset, root, jobs, threads, extra, counts)
    if more_seeds:
        split = split_attentions(root, names, seeds, archived)
        more = pending([(SweepPoint(seed), split) for seed in more_seeds], root, done)
        print(f"split at seeds {list(seeds)}: {split or 'none'}; "
              f"{sum(len(n) for _, n in more)} runs of more seeds to go", flush=True)
        run_tasks(more, preset, root, jobs, threads, extra, counts)
    return counts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--seeds, --more-seeds and --attention."""
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="the seeds of every attention (default 1-5)")
    parser.add_argument("--more-seeds", type=non_negative_int, nargs="*", default=[6, 7, 8, 9, 10],
                        help="the seeds added where --seeds split (default 6-10; "
                             "`--more-seeds` with none after it: no more seeds)")
    add_attention_argument(parser)


def check_arguments(args: argparse.Namespace) -> str | None:
    if set(args.more_seeds) & set(args.seeds):
        return f"--more-seeds {args.more_seeds} repeats seeds of --seeds {args.seeds}"
    return None


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The attentions swept and the runs --resume-from lists as finished."""

    names: list[str]
    archived: Archive | None


def load(args: argparse.Namespace) -> Loaded:
    names = check_variant_names(args.attention) if args.attention else variant_names()
    if args.resume_from is None:
        return Loaded(names, None)
    task, max_steps = sweep_protocol(args.preset, args.overrides)
    archived = archived_runs(load_runs_csv(args.resume_from), args.root, task, max_steps)
    print(f"{args.resume_from}: {len(archived)} runs of this sweep count as finished",
          flush=True)
    return Loaded(names, archived)


def run(args: argparse.Namespace, loaded: Loaded) -> dict[str, int]:
    return run_sweep(args.preset, args.root, loaded.names, args.seeds, args.more_seeds,
                     args.jobs, args.threads, args.overrides, loaded.archived)


# No report: scripts/compare.py compares the sweep's runs (its multirun folder is --root).
SEED_SWEEP = Study(
    name="seed_sweep",
    description="Train every attention at several seeds, with more seeds where the outcomes "
                "split; resumable",
    load=load, run=run, add_arguments=add_arguments, check_arguments=check_arguments,
    root=None, script="scripts/seed_sweep.py",
    help={"--preset": "a conf/experiment/ preset (default: none, the default config)",
          "--root": "the sweep's folder (its multirun folder for compare.py)",
          "--resume-from": "a runs CSV compare.py wrote of this sweep (results_runs.csv): the "
                           "runs it lists from <...>/<root's name>/seed<s>/<attention>/ are "
                           "finished",
          "overrides": "train.py overrides for every run"},
)
