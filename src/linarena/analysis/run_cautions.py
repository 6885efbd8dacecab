"""What the comparison (compare.py) says beside its table, so that a reader does not take a row
for more than it is: the rows of too few seeds, the runs whose peak memory includes earlier jobs'
(a `train.py -m` process on CPU), the failed runs, the runs stopped before they finished (with
the command that resumes them), the tasks trained for different numbers of steps, and the runs
whose tokens/s says the machine was busy.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import yaml

from linarena.analysis.order import attention_label, attention_sort_key
from linarena.analysis.runs import RunRecord, parse_summary_file
from linarena.metrics import TOKENS_PER_SEC
from linarena.training.launch import BASIC_LAUNCHER
from linarena.training.summary import SUMMARY_FILE

# Rows with fewer finished seeds than this are a caution: the published ListOps rows differ by
# about a point over 10 seeds, and a single 100-step seed put elu+1 7 points below softmax.
MIN_SEEDS = 3
SEED_CAUTION = "one seed is an anecdote; see scripts/seed_sweep.py for a comparison with intervals"
SHARED_CAUTION = ("on CPU a run's peak memory then includes what the earlier jobs left "
                  "resident, so it is not the run's alone; compare the memory of runs that "
                  "each had a process of their own (scripts/seed_sweep.py trains them so)")


def folder_of(sweep: str) -> str:
    """The multirun folder (or "runs") of a sweep label, without its settings."""
    return sweep.split(": ", 1)[0]


def few_seeds_caution(table: pd.DataFrame, with_task: bool = True) -> str | None:
    """The caution for the rows of `table` (aggregate_runs) with 1 to MIN_SEEDS - 1 finished
    seeds, naming them (with their task), or None."""
    few = table[table["n"].between(1, MIN_SEEDS - 1)]
    if few.empty:
        return None
    names = dict.fromkeys(
        f"{f'{row.task}/' if with_task else ''}{attention_label(row.attention)} (n={row.n})"
        for row in few.itertuples())
    return f"fewer than {MIN_SEEDS} seeds: {', '.join(names)}; {SEED_CAUTION}"


def shared_process_runs(records: Iterable[RunRecord]
                        ) -> dict[tuple[str, str], list[RunRecord]]:
    """The runs that trained on CPU after other jobs of their `train.py -m` process, by
    multirun folder and task, in attention and seed order."""
    shared: dict[tuple[str, str], list[RunRecord]] = {}
    for run in sorted(records, key=lambda r: (attention_sort_key(r.attention), r.seed)):
        if _after_other_jobs(Path(run.source).parent) and \
                parse_summary_file(Path(run.source)).get("device") == "cpu":
            shared.setdefault((folder_of(run.sweep), run.task), []).append(run)
    return shared


def _after_other_jobs(run: Path) -> bool:
    """Whether the run folder's last training (its start, or its latest resume) was a job of a
    multirun under the basic launcher after its first job, from the Hydra config that job
    saved; False where there is none (a W&B run, a run of a runs CSV)."""
    for saved in (run / ".hydra" / "resume" / "hydra.yaml", run / ".hydra" / "hydra.yaml"):
        if saved.is_file():
            try:
                hydra = (yaml.safe_load(saved.read_text()) or {}).get("hydra") or {}
            except yaml.YAMLError:
                return False
            return (hydra.get("mode") == "MULTIRUN"
                    and (hydra.get("launcher") or {}).get("_target_") == BASIC_LAUNCHER
                    and int((hydra.get("job") or {}).get("num") or 0) > 0)
    return False


def shared_caution(runs: list[RunRecord], with_folder: bool = True) -> str | None:
    """The caution for `runs`, of one multirun folder and task (shared_process_runs), naming
    them (with the folder and task), or None when there are none."""
    if not runs:
        return None
    where = f"{runs[0].task}, {folder_of(runs[0].sweep)}: " if with_folder else ""
    names = ", ".join(f"{attention_label(run.attention)} s{run.seed}" for run in runs)
    return (f"{where}{runs_count(len(runs))} ({names}) trained after other jobs of the same "
            f"`train.py -m` process: {SHARED_CAUTION}")


def runs_count(count: int) -> str:
    """'1 run', '3 runs'."""
    return f"{count} run" + ("" if count == 1 else "s")


def failed_note(records: list[RunRecord]) -> str | None:
    """A note naming the failed runs (no finite test accuracy), or None."""
    failed = [record.source for record in records if record.failed]
    if not failed:
        return None
    shown = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    return (f"{len(failed)} run(s) failed (test/acc NaN or missing: diverged), counted in the "
            f"'failed' column and left out of the means: {shown}")


def unfinished_runs(dirs: Iterable[Path], include_debug: bool) -> list[Path]:
    """The run folders under `dirs` with checkpoints/last.ckpt but no summary.json: runs stopped
    (a signal, kill -9, a crash) before they finished, which nothing can be compared of; debug
    runs only with `include_debug`."""
    found = []
    for directory in dirs:
        for last in sorted(directory.rglob("last.ckpt")) if directory.is_dir() else ():
            run = last.parent.parent
            if last.parent.name == "checkpoints" and not (run / SUMMARY_FILE).is_file() and (
                    include_debug or not _is_debug(run)):
                found.append(run.resolve())
    return found


def _is_debug(run: Path) -> bool:
    """Whether the run's saved config is a debug preset's (run_group debug)."""
    try:
        config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and config.get("run_group") == "debug"


def steps_warnings(records: Iterable[RunRecord]) -> list[str]:
    """A warning per task whose runs were trained for different numbers of steps
    (trainer.max_steps), naming each budget's sweeps: their rows and points are not a
    like-for-like comparison. Runs whose budget is unknown are left out."""
    sweeps: dict[str, dict[int, set[str]]] = {}
    for run in records:
        if run.max_steps is not None:
            sweeps.setdefault(run.task, {}).setdefault(run.max_steps, set()).add(run.sweep)
    return [f"runs of {task} trained for different numbers of steps: "
            + ", ".join(f"{steps} ({'; '.join(sorted(labels))})"
                        for steps, labels in sorted(budgets.items()))
            + "; their rows (the steps column) are not a like-for-like comparison"
            for task, budgets in sweeps.items() if len(budgets) > 1]


# A run below this share of its other seeds' median tokens/s was most likely slowed by something
# else on the machine: on the shared 2-core VM one attention's seeds ran at 0.75-1.30 x their
# median (the 285 runs of docs/results/results_runs.csv on one CPU), while two runs with a test
# suite beside them ran at about 0.2 x (not kept: they were trained again).
CONTENDED_SHARE = 0.5


def throughput_warnings(records: Iterable[RunRecord]) -> list[str]:
    """A warning per run whose tokens/s is below CONTENDED_SHARE of the median of the other
    seeds (at least 2) of its sweep, task and attention: its tokens/s is in the row's mean as
    measured, so rerun it on an idle machine (remove its folder and resume the sweep)."""
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for run in records:
        if run.metrics.get(TOKENS_PER_SEC.key) is not None:
            groups.setdefault((run.sweep, run.task, run.attention), []).append(run)
    warnings = []
    for (sweep, task, attention), runs in groups.items():
        for run in runs:
            others = [other.metrics[TOKENS_PER_SEC.key] for other in runs if other is not run]
            if len(others) < 2:
                continue
            share = run.metrics[TOKENS_PER_SEC.key] / statistics.median(others)
            if share < CONTENDED_SHARE:
                warnings.append(
                    f"{task}/{attention} seed {run.seed} ({sweep}) ran at "
                    f"{run.metrics[TOKENS_PER_SEC.key]:,.0f} tokens/s, {share:.2f} x the median "
                    f"of its other seeds: was the machine busy?{_cpu_note(run, runs)} Its "
                    f"tokens/s is in the mean; rerun it on an idle machine ({run.source})")
    return warnings


def _cpu_share(run: RunRecord) -> float | None:
    """CPU seconds of the run's process per second of wall time (None where not recorded)."""
    if run.cpu_s is None or not run.duration_s:
        return None
    return run.cpu_s / run.duration_s


def _cpu_note(run: RunRecord, runs: list[RunRecord]) -> str:
    """What the run's CPU time says of it beside its other seeds', where it was recorded: a
    process given less CPU per second than they were shared its cores with another."""
    own = _cpu_share(run)
    others = [value for other in runs if other is not run
              if (value := _cpu_share(other)) is not None]
    if own is None or not others:
        return ""
    return (f" Its process had {own:.2f} CPU-seconds per second of wall time, its other "
            f"seeds {statistics.median(others):.2f} (median).")
