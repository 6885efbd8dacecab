"""Was the MQAR study's step budget enough? Its points rerun with more steps, same lr and seeds.

The state-size study (state_size.py) stops a run at val accuracy 0.99 or at trainer.max_steps,
and max_steps is enough when the median run has stopped improving by then. The median step of
the best validation accuracy cannot say that alone: on the chance plateau that step is noise.
So the check reruns chosen points of the finished study with a larger max_steps, at the lr the
study chose for each (on validation) and with every seed of its grid, so that the budget is the
only change, and compares per point: the median test accuracy, the seeds that reached 90% and
the median step of the best validation accuracy, at both budgets.

Two kinds of longer run, said in the caption, since they answer different questions:
- a longer budget: the preset's schedule over --max-steps (a cosine decay then reaches 0 at the
  new budget, so this is another run, not the study's run continued);
- a constant-lr tail (TailPoint): the study's run continued from its last checkpoint
  (init_weights) for --tail more steps at a constant lr, a fraction of the study's, no warmup.
  If the study's run had stopped improving, its tail does not improve it either.

A tail is compared with the run it continued, whose result its row keeps (START_COLUMNS). That
is the published run where its checkpoint survives or its retrain repeats it bit for bit (same
kernels); a study run trained again on another CPU's kernels differs from its published row, and
its tail continues, and is compared with, the run trained here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.statistics import STATISTICS_COLUMNS, SUCCESS_THRESHOLD, point_statistics
from linarena.studies.runs import GROUP, load_study
from linarena.studies.state_size import choose_lr, lr_basis
from linarena.studies.study import StudyPoint, Task, group_tasks, train_commands
from linarena.training.summary import SUMMARY_FILE

# Learning rates are floats read back from CSVs and configs: matched at this many digits.
LR_DIGITS = 10
KEY = [*GROUP, "lr", "seed"]
# A tail's row: the run it continued (the study run at --study-root), column by column.
START_COLUMNS = {"test_acc": "start_test_acc", "best_step": "start_best_step",
                 "commit": "start_commit", "cpu_kernels": "start_cpu_kernels"}


def chosen_points(study: pd.DataFrame, grid: dict[str, Any], widths: Sequence[int],
                  short_convs: Sequence[int], attentions: Sequence[str]) -> pd.DataFrame:
    """The study's (attention, short_conv, d_model) points at `widths` and `short_convs` for
    `attentions`, each with the lr the study chose (on the grid's lr seeds' runs): columns
    GROUP + ["lr"]."""
    chosen = choose_lr(lr_basis(study, grid)).reset_index()
    keep = (chosen["d_model"].isin(widths) & chosen["short_conv"].isin(short_convs)
            & chosen["attention"].isin(attentions))
    return chosen[keep].reset_index(drop=True)


def plan(points: pd.DataFrame, study: pd.DataFrame) -> list[Task]:
    """One (StudyPoint, attentions) task per (width, short conv, lr, seed): every seed the study
    ran at each chosen point, the attentions that share a point trained by one train.py call."""
    tasks = []
    for row in points.itertuples():
        at = study[(study["attention"] == row.attention) & (study["short_conv"] == row.short_conv)
                   & (study["d_model"] == row.d_model) & (study["lr"].round(LR_DIGITS)
                                                         == round(row.lr, LR_DIGITS))]
        tasks += [(StudyPoint(int(row.d_model), int(row.short_conv), float(row.lr), int(seed)),
                   row.attention) for seed in sorted(at["seed"].unique())]
    return group_tasks(sorted(tasks, key=lambda task: task[0].seed))


def study_checkpoint(study_root: Path, point: StudyPoint, name: str) -> Path:
    """The last.ckpt of the study's run of `name` at `point`: where its tail starts."""
    return study_root / point.folder_name / name / "checkpoints" / "last.ckpt"


def study_run_finished(study_root: Path, point: StudyPoint, name: str) -> bool:
    """Whether the study's run of `name` at `point` finished with its last.ckpt: a run stopped
    mid-training (a sitting's end) leaves a last.ckpt from its middle but no summary.json."""
    folder = study_root / point.folder_name / name
    return (folder / SUMMARY_FILE).is_file() and study_checkpoint(study_root, point,
                                                                  name).is_file()


@dataclasses.dataclass(frozen=True)
class TailPoint:
    """A study point continued: each attention's run at `point` in `study_root`, from its
    last.ckpt, for `steps` steps at lr * `lr_fraction`, constant, no warmup; a folder per
    attention under <root>/<the point's folder>/."""

    point: StudyPoint
    study_root: Path
    steps: int
    lr_fraction: float

    @property
    def folder_name(self) -> str:
        return self.point.folder_name

    def commands(self, preset: str, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]:
        """One train.py call per attention (each starts from its own run's weights)."""
        point = self.point
        tail_lr = dataclasses.replace(point, lr=point.lr * self.lr_fraction)
        settings = [*tail_lr.settings, "optim.schedule=constant", "optim.warmup_steps=0",
                    f"trainer.max_steps={self.steps}"]
        starts = {name: [*(entries or {}).get(name, ()),
                         f"init_weights={study_checkpoint(self.study_root, point, name)}"]
                  for name in names}
        return train_commands(preset, settings, names, root / self.folder_name, starts)


def plan_tail(points: pd.DataFrame, study: pd.DataFrame, study_root: Path, steps: int,
              lr_fraction: float) -> list[Task]:
    """plan()'s tasks as TailPoints: every seed the study ran at each chosen point, continued."""
    return [(TailPoint(point, study_root, steps, lr_fraction), names)
            for point, names in plan(points, study)]


def unreproduced(study: pd.DataFrame, retrained: pd.DataFrame) -> pd.DataFrame:
    """The retrained study runs (runs of `retrained`, e.g. trained again for the checkpoint a
    tail starts from) whose test accuracy or best step differ from their rows in `study`: on
    the machine and kernel path that trained them a run is bit-identical, so a row here means
    the tail would not continue the published run."""
    both = study.merge(retrained, on="run", suffixes=("", "_retrained"))

    def same(column: str) -> pd.Series:  # a diverged run has no accuracy in either
        old, new = both[column], both[f"{column}_retrained"]
        return (old == new) | (old.isna() & new.isna())

    differ = ~(same("test_acc") & same("best_step"))
    return both.loc[differ, ["run", "test_acc", "test_acc_retrained", "best_step",
                             "best_step_retrained"]]


def with_starts(tails: pd.DataFrame, study_root: Path, lr_fraction: float,
                archived: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tails (runs of TailPoints at `lr_fraction` x the study's lr) with START_COLUMNS: the
    result of the run each continued, from `archived` (a tails' runs CSV, by run) where a row
    was read back from it, else from that study run's folder at `study_root`."""
    starts = (pd.DataFrame(columns=["run", *START_COLUMNS.values()]) if archived is None
              else archived[["run", *START_COLUMNS.values()]])
    kept = tails[tails["run"].isin(starts["run"])].merge(starts, on="run")
    fresh = tails[~tails["run"].isin(starts["run"])]
    if fresh.empty:
        return kept
    found = (load_study([study_root]) if study_root.is_dir()
             else pd.DataFrame(columns=[*KEY, *START_COLUMNS]))
    # matched on the study run's lr, the tail's own lr kept as it was read
    found = found[[*KEY, *START_COLUMNS]].rename(columns={**START_COLUMNS, "lr": "study_lr"})
    found["study_lr"] = found["study_lr"].astype(float).round(LR_DIGITS)
    fresh = fresh.assign(study_lr=(fresh["lr"] / lr_fraction).round(LR_DIGITS)).merge(
        found, on=[*GROUP, "study_lr", "seed"], how="left", indicator=True)
    absent = fresh[fresh["_merge"] == "left_only"]
    if len(absent):
        raise FileNotFoundError(
            f"tail {absent['run'].iloc[0]} (and {len(absent) - 1} more): the study run it "
            f"continued has no finished run folder in {study_root}: point --study-root at the "
            "study's run folders, or report from the tails' runs CSV (--resume-from), which "
            "names each start")
    fresh = fresh.drop(columns=["_merge", "study_lr"])
    return pd.concat([kept, fresh], ignore_index=True).sort_values("run", kind="stable") \
        .reset_index(drop=True)


def continued(study: pd.DataFrame, tails: pd.DataFrame) -> pd.DataFrame:
    """The study's runs as its tails (with_starts, lr already the study's) continued them: each
    tail's start replaces its study run's test accuracy and best step, which differ where the
    run was trained again on other kernels than the published one's."""
    starts = tails.assign(lr=tails["lr"].round(LR_DIGITS))[
        [*KEY, "start_test_acc", "start_best_step"]].drop_duplicates(KEY)
    runs = study.assign(lr_key=study["lr"].round(LR_DIGITS)).merge(
        starts.rename(columns={"lr": "lr_key"}), on=[*GROUP, "lr_key", "seed"], how="left")
    has = runs["start_test_acc"].notna() | runs["start_best_step"].notna()
    runs.loc[has, "test_acc"] = runs.loc[has, "start_test_acc"].astype(float)
    runs.loc[has, "best_step"] = runs.loc[has, "start_best_step"].astype(float)
    return runs.drop(columns=["lr_key", "start_test_acc", "start_best_step"])


def _at_points(runs: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """The rows of `runs` at the points' (attention, short_conv, d_model, lr)."""
    keyed = points.assign(lr=points["lr"].round(LR_DIGITS))
    return runs.assign(lr=runs["lr"].round(LR_DIGITS)).merge(keyed, on=[*GROUP, "lr"])


def compare(study: pd.DataFrame, longer: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Per point: median test accuracy, seeds that recalled and median best step in the study
    (`study` runs) and in the longer runs (`longer`), over the seeds both have; `gain_median`
    is the median over those seeds of (longer - study) test accuracy; then the
    STATISTICS_COLUMNS of each budget, suffixed _study and _longer."""
    short = _at_points(study, points)
    long = _at_points(longer, points)
    paired = short.merge(long, on=KEY, suffixes=("_study", "_longer"))
    rows = []
    for key, group in paired.groupby([*GROUP, "lr"]):
        stats = {side: point_statistics(group[f"test_acc_{side}"]) for side in ("study", "longer")}
        rows.append({
            **dict(zip([*GROUP, "lr"], key, strict=True)), "label": group["label_study"].iloc[0],
            "seeds": len(group),
            **{f"{what}_{side}": value for side in ("study", "longer") for what, value in (
                ("max_steps", int(group[f"max_steps_{side}"].iloc[0])),
                ("test_acc_median", group[f"test_acc_{side}"].median()),
                ("recalled", stats[side]["successes"]),
                ("best_step_median", group[f"best_step_{side}"].median()))},
            "gain_median": (group["test_acc_longer"] - group["test_acc_study"]).median(),
            **{f"{column}_{side}": stats[side][column] for side in ("study", "longer")
               for column in STATISTICS_COLUMNS},
        })
    return pd.DataFrame(rows)


def comparison_table(table: pd.DataFrame, order: Sequence[str], tail: bool = False) -> str:
    """Markdown, a row per point in `order` of attentions: median test accuracy % (seeds that
    reached 90%) at each budget, the median gain, and the median best step at each budget;
    `tail`: the longer runs are tails, steps after the study's."""
    first = table.iloc[0]
    short, long = f"{first['max_steps_study']:,}", f"{first['max_steps_longer']:,}"
    longer, steps = ((f"+{long} steps (tail)", "study → tail") if tail
                     else (f"{long} steps", f"{short} → {long}"))
    lines = [f"| attention | short conv | d_model | lr | {short} steps | {longer} | "
             f"median gain | best step ({steps}) |", "|---|---|---|---|---|---|---|---|"]
    rank = {name: index for index, name in enumerate(order)}
    table = table.sort_values(["short_conv", "d_model"], ascending=[False, True], kind="stable")
    table = table.sort_values("attention", key=lambda names: names.map(rank), kind="stable")
    for row in table.itertuples():
        lines.append(
            f"| {row.label} | {row.short_conv or 'off'} | {row.d_model} | {row.lr:g} | "
            f"{100 * row.test_acc_median_study:.1f} ({row.recalled_study}/{row.seeds}) | "
            f"{100 * row.test_acc_median_longer:.1f} ({row.recalled_longer}/{row.seeds}) | "
            f"{100 * row.gain_median:+.1f} | {row.best_step_median_study:,.0f} → "
            f"{row.best_step_median_longer:,.0f} |")
    return "\n".join(lines) + "\n"


def caption(table: pd.DataFrame, planned: int, done: int,
            tail_fraction: float | None = None, retrained: int = 0) -> str:
    """What the table shows, above it in <name>.md; says so when runs are still missing.
    `tail_fraction`: the longer runs are constant-lr tails at this fraction of the study's lr;
    `retrained`: how many of them continued a study run trained again that differs from its
    published row."""
    first = table.iloc[0]
    if tail_fraction is not None:
        text = (f"The state-size study's runs at these points continued from their last "
                f"checkpoint (init_weights) for {first['max_steps_longer']:,} more steps at a "
                f"constant lr, {tail_fraction:g} x the lr the study chose (no warmup), each seed "
                f"from its own run; early stop at val acc 0.99. The question: had a run stopped "
                f"improving by step {first['max_steps_study']:,}, or does it gain when trained "
                f"on at a lower lr? "
                f"Each cell: median test accuracy (%) over seeds and (k/n) the seeds that "
                f"reached {100 * SUCCESS_THRESHOLD:.0f}%; median gain: the median over seeds of "
                f"the tail's test accuracy minus the study's; best step: the median step of the "
                f"best validation accuracy (the tail's counted from its start).\n\n")
        if retrained:
            text += (f"{retrained} of the {done} tails continued a study run whose test "
                     f"accuracy or best step differs from its published row (trained again, its "
                     f"checkpoint gone, on other CPU kernels than the published run's): at "
                     f"those seeds the "
                     f"{first['max_steps_study']:,}-step column is the run trained again, the "
                     f"one the tail continued (the runs CSV's start_* columns give each tail's "
                     f"start).\n\n")
        if done < planned:
            text = (f"PARTIAL: {done} of {planned} runs finished; points with fewer seeds than "
                    f"the study are incomplete.\n\n" + text)
        return text
    text = (f"The state-size study's points rerun with trainer.max_steps "
            f"{first['max_steps_longer']:,} instead of {first['max_steps_study']:,}, at the lr the "
            f"study chose for each (on validation) and with the same seeds; early stop at val "
            f"acc 0.99 in both. The preset's lr schedule spans the longer budget (a cosine decay "
            f"reaches 0 at the new max_steps), so a longer run is not the study's run "
            f"continued. Each cell: median test accuracy (%) over seeds and (k/n) the seeds "
            f"that reached {100 * SUCCESS_THRESHOLD:.0f}%; median gain: the median over seeds of "
            f"the longer run's test accuracy minus the study's; best step: the median step of the "
            f"best validation accuracy.\n\n")
    if done < planned:
        text = (f"PARTIAL: {done} of {planned} runs finished; points with fewer seeds than the "
                f"study are incomplete.\n\n" + text)
    return text
