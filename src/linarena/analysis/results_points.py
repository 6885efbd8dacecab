"""Below each README result table: the command of one run that reproduces one published point,
with that point's published value and, where the data has it (a `duration_s` column), how long
one run took; and the grid flags (--attentions, --lengths) a benchmark table's caption shows.
Every CSV is read whole or refused (linarena.analysis.result_files)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from linarena.analysis.bench_runner import NUMERIC_COLUMNS as BENCHMARK_NUMBERS
from linarena.analysis.bench_runner import READ_COLUMNS
from linarena.analysis.order import attention_label as label
from linarena.analysis.provenance import load
from linarena.analysis.result_files import read_csv_checked
from linarena.studies.runs import NUMERIC_COLUMNS, RUN_COLUMNS
from linarena.studies.statistics import RECALL_TASKS

# Columns of the attention benchmark that are not conf/attention/ variants.
REFERENCE_LABELS = {"einsum_elu": "einsum elu+1", "performer_pytorch": "performer-pytorch"}
ATTENTION_NUMBERS = ("length", "fwd_ms", "fwd_bwd_ms", "peak_memory_mb")
ATTENTION_SOURCES = {"attention": "benchmark_attention.csv",
                     "attention_causal": "benchmark_attention_causal.csv"}
TRAINING_NEEDS = ("sweep", "task", "attention", "n", "test_acc_pct_mean", "test_acc_pct_std",
                  "tokens_per_sec_mean", "peak_memory_mb_mean")
TRAINING_NUMBERS = ("n", "test_acc_pct_mean", "test_acc_pct_std", "tokens_per_sec_mean",
                    "peak_memory_mb_mean", "duration_s_median")


def attention_csv(path: Path) -> pd.DataFrame:
    """benchmark_attention.py's CSV (bidirectional or causal), read whole."""
    return read_csv_checked(path, ["variant", "length", "fwd_bwd_ms", "status"],
                            ATTENTION_NUMBERS, ["variant", "length", "status"])


def model_csv(path: Path) -> pd.DataFrame:
    """benchmark_model.py's CSV, read whole, with the columns the table needs."""
    return read_csv_checked(path, [*READ_COLUMNS, "tokens_per_sec"], BENCHMARK_NUMBERS,
                            ["attention", "length", "what", "status"])


def training_csv(path: Path) -> pd.DataFrame:
    """compare.py's results.csv, read whole."""
    return read_csv_checked(path, TRAINING_NEEDS, TRAINING_NUMBERS,
                            ["sweep", "task", "attention", "n"])


def _lengths(table: pd.DataFrame) -> str:
    return ",".join(str(int(n)) for n in sorted(set(table["length"])))


def benchmark_flags(name: str, folder: Path) -> list[str]:
    """The --attentions and --lengths a benchmark table's CSV holds (its caption's command shows
    them); none for the other tables."""
    if name in ATTENTION_SOURCES:
        table = attention_csv(folder / ATTENTION_SOURCES[name])
        variants = [v for v in dict.fromkeys(table["variant"]) if v not in REFERENCE_LABELS]
    elif name == "model":
        table = model_csv(folder / "benchmark_model.csv")
        variants = list(dict.fromkeys(table["attention"]))
    else:
        return []
    return ["--attentions", ",".join(variants), "--lengths", _lengths(table)]


def _took(durations: pd.Series) -> str:
    """How long one run took, when the data says (a duration_s column with values)."""
    seconds = durations.dropna()
    return f"; one run took {seconds.median():,.0f} s here (median)" if len(seconds) else ""


def _accuracy(fraction: float) -> str:
    """A run's test accuracy in percent; a diverged run has none."""
    return "no test accuracy (diverged)" if pd.isna(fraction) else \
        f"test accuracy {100 * fraction:.1f}%"


def _line(command: str, point: str) -> str:
    """The line under a table: the command, then what it reproduces."""
    return f"One run: `{command}` ({point})."


def attention_point(source: str, causal: bool) -> Callable[[Path], list[str]]:
    """The first measured case of an attention benchmark CSV, alone."""
    def point(folder: Path) -> list[str]:
        table = attention_csv(folder / source)
        measured = table[(table["status"] == "ok") & ~table["variant"].isin(REFERENCE_LABELS)]
        if measured.empty:
            return []
        row = measured.iloc[0]
        command = (f"python scripts/benchmark_attention.py --attentions {row['variant']} "
                   f"--lengths {int(row['length'])} --no-references" + " --causal" * causal)
        return [_line(command, f"{label(row['variant'])} at N={int(row['length'])}: "
                               f"{row['fwd_bwd_ms']:,.1f} ms fwd+bwd in the table")]
    return point


def performer_error_point(folder: Path) -> list[str]:
    """The first input scale of the error table."""
    table = read_csv_checked(folder / "benchmark_attention_performer_error.csv",
                             ["inputs", "length", "qk_scale", "performer"],
                             ["length", "qk_scale", "performer"])
    row = table.iloc[0]
    command = (f"python scripts/benchmark_attention.py --attentions performer --lengths "
               f"{int(row['length'])} --error-scales {row['qk_scale']:g}")
    return [_line(command, f"{row['inputs']} inputs at scale {row['qk_scale']:g}: linarena's "
                           f"error {row['performer']:.4f} in the table")]


def model_point(folder: Path) -> list[str]:
    """The first measured training step of the model benchmark, alone."""
    table = model_csv(folder / "benchmark_model.csv")
    measured = table[(table["what"] == "model_step") & (table["status"] == "ok")]
    if measured.empty:
        return []
    row = measured.iloc[0]
    command = (f"python scripts/benchmark_model.py --attentions {row['attention']} --lengths "
               f"{int(row['length'])} --what model_step")
    return [_line(command, f"{label(row['attention'])} at N={int(row['length'])}: "
                           f"{row['tokens_per_sec']:,.0f} tokens/s, {row['ms']:,.0f} ms per step "
                           "in the table")]


def _sweep_runs(folder: Path) -> pd.DataFrame | None:
    """compare.py's per-run CSV beside results.csv; None where there is none."""
    path = folder / "results_runs.csv"
    if not path.is_file():
        return None
    return read_csv_checked(path, ["sweep", "task", "attention", "seed", "test_acc_pct"],
                            ["seed", "test_acc_pct"])


def _seed_one_accuracy(runs: pd.DataFrame | None, row: pd.Series) -> float | None:
    """Seed 1's test accuracy (%) of `row`'s sweep, task and attention in `runs`; None where
    there is no such file or row."""
    if runs is None:
        return None
    match = runs[(runs["sweep"] == row["sweep"]) & (runs["task"] == row["task"])
                 & (runs["attention"] == row["attention"]) & (runs["seed"] == 1)]
    return None if match.empty else float(match["test_acc_pct"].iloc[0])


def _table_statistic(row: pd.Series) -> str:
    """What the training table shows of `row`: the median for recall tasks, else the mean."""
    if row["task"] in RECALL_TASKS and pd.notna(row.get("median_acc")):
        return f"median {100 * row['median_acc']:.1f}%"
    return f"mean {row['test_acc_pct_mean']:.2f}%"


def training_point(folder: Path) -> list[str]:
    """A run of each task: the first attention of its sweep, seed 1, with the sweep's settings,
    and seed 1's own accuracy where the per-run CSV has it (the command reproduces that)."""
    table = training_csv(folder / "results.csv")
    runs = _sweep_runs(folder)
    lines = []
    for _, rows in table.groupby("task", sort=False):
        row = rows.iloc[0]
        settings = row["sweep"].split(": ", 1)[1] if ": " in row["sweep"] else ""
        command = " ".join(word for word in ("python train.py", settings,
                                             f"attention={row['attention']}", "seed=1") if word)
        took = _took(rows.get("duration_s_median", pd.Series(dtype=float)))
        seed_one = _seed_one_accuracy(runs, row)
        if seed_one is None:
            value = (f": test accuracy {row['test_acc_pct_mean']:.2f}% as the mean of "
                     f"{int(row['n'])} seeds in the table")
        else:
            value = (f", seed 1: test accuracy {seed_one:.2f}% in results_runs.csv; the table's "
                     f"{int(row['n'])} seeds: {_table_statistic(row)}")
        lines.append(_line(command, f"{row['task']}, {label(row['attention'])}{value}{took}"))
    return lines


def _option(command: str, pattern: str, default: str) -> str:
    """The first match of `pattern` (one group) in a record's command, else `default`."""
    found = re.search(pattern, command)
    return found[1] if found else default


def _runs(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / name
    if not path.is_file():
        return None
    return read_csv_checked(path, RUN_COLUMNS, NUMERIC_COLUMNS)


def _study_command(preset: str, row: pd.Series, extra: str = "") -> str:
    return (f"python train.py experiment={preset} attention={row['attention']} "
            f"model.d_model={int(row['d_model'])} model.short_conv={int(row['short_conv'])} "
            f"optim.lr={float(row['lr'])} seed={int(row['seed'])}{extra}")


def _run_point(row: pd.Series, runs: pd.DataFrame, start: str = "") -> str:
    """What a one-run line reproduces: the run, its accuracy (then `start`, where it began)
    and how long the runs took."""
    conv = f"short conv {int(row['short_conv'])}" if row["short_conv"] else "no short conv"
    return (f"{label(row['attention'])}, d_model {int(row['d_model'])}, {conv}, seed "
            f"{int(row['seed'])}: {_accuracy(row['test_acc'])} in its runs CSV{start}"
            + _took(runs.get("duration_s", pd.Series(dtype=float))))


def study_point(folder: Path) -> list[str]:
    """The first point of the state-size table, at its chosen lr, on the lowest seed."""
    runs = _runs(folder, "mqar_state_size_runs.csv")
    if runs is None:
        return []
    first = read_csv_checked(folder / "mqar_state_size.csv",
                             ["attention", "short_conv", "d_model", "chosen_lr"],
                             ["short_conv", "d_model", "chosen_lr"]).iloc[0]
    at = runs[(runs["attention"] == first["attention"])
              & (runs["short_conv"] == first["short_conv"]) & (runs["d_model"] == first["d_model"])
              & np.isclose(runs["lr"], first["chosen_lr"])]
    if at.empty:
        return []
    row = at.sort_values("seed").iloc[0]
    command = load(folder).get("mqar_state_size.csv", {}).get("command", "")
    preset = _option(command, r"--preset[ =]([\w/]+)", "mqar_study_cpu")
    return [_line(_study_command(preset, row), _run_point(row, runs))]


def step_budget_point(folder: Path) -> list[str]:
    """The first of the longer runs. A tail's line is its own recorded command (its constant
    lr and the checkpoint it continues, the path made relative to the repository) and says
    where it started; a longer run's is the study's command with its max_steps."""
    runs = _runs(folder, "mqar_step_budget_runs.csv")
    if runs is None:
        return []
    row = runs.iloc[0]
    if "start_test_acc" in runs.columns and pd.notna(row.get("command")):
        tail = re.sub(r"init_weights=\S*?/(outputs/\S+)", r"init_weights=\1", row["command"])
        start = (f", continuing the study run of the checkpoint it names "
                 f"({_accuracy(row['start_test_acc'])}; `mqar_step_budget.py --retrain-study` "
                 "trains that run where it is gone)")
        return [_line(tail, _run_point(row, runs, start))]
    command = load(folder).get("mqar_step_budget.csv", {}).get("command", "")
    preset = _option(command, r"--preset[ =]([\w/]+)", "mqar_study_cpu")
    extra = f" trainer.max_steps={int(row['max_steps'])}"
    return [_line(_study_command(preset, row, extra), _run_point(row, runs))]


def mixture_point(folder: Path) -> list[str]:
    """The first run and test setting of the mixture's runs CSV."""
    path = folder / "mqar_mixture_runs.csv"
    if not path.is_file():
        return []
    runs = read_csv_checked(path, ["attention", "seed", "length", "pairs", "acc"],
                            ["seed", "length", "pairs", "acc", "duration_s"])
    row = runs.iloc[0]
    command = load(folder).get("mqar_mixture.csv", {}).get("command", "")
    preset = _option(command, r"experiment=([\w/]+)", "mqar_mixture_cpu")
    return [_line(f"python train.py experiment={preset} attention={row['attention']} "
                  f"seed={int(row['seed'])}",
                  f"{label(row['attention'])}, seed {int(row['seed'])}: {_accuracy(row['acc'])} "
                  f"at L{int(row['length'])} P{int(row['pairs'])} in its runs CSV"
                  + _took(runs.get("duration_s", pd.Series(dtype=float))))]


# table name -> its one-run lines (results_tables.TABLES); the default run's table is one
# run, the command its caption shows.
POINTS: dict[str, Callable[[Path], list[str]]] = {
    "default_run": lambda folder: [],
    "attention": attention_point("benchmark_attention.csv", causal=False),
    "attention_causal": attention_point("benchmark_attention_causal.csv", causal=True),
    "performer_error": performer_error_point,
    "model": model_point,
    "training": training_point,
    "mqar_state_size": study_point,
    "mqar_step_budget": step_budget_point,
    "mqar_mixture": mixture_point,
}
