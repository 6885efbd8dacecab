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
from linarena.analysis.statistics import RECALL_TASKS
from linarena.studies.runs import NUMERIC_COLUMNS, RUN_COLUMNS

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


def _took(row: pd.Series) -> str:
    """How long this run took and on which machine, where its row says (duration_s, cpu,
    cpu_kernels): the figure is that machine's, not a promise for another."""
    seconds = row.get("duration_s")
    if seconds is None or pd.isna(seconds):
        return ""
    cpu, kernels = row.get("cpu"), row.get("cpu_kernels")
    where = f" on {cpu}" if isinstance(cpu, str) and cpu else ""
    where += f" ({kernels} kernels)" if isinstance(kernels, str) and kernels else ""
    return f"; this run took {seconds:,.0f} s{where}"


def _elsewhere(successes: float, seeds: float) -> str:
    """What another CPU reproduces of a recall point: its rate, not one seed's accuracy (other
    kernels sum in another order, which can move a seed across the 90% threshold)."""
    if pd.isna(successes) or pd.isna(seeds):
        return ""
    return (f"; on another CPU a seed may land on the other side of 90%: what reproduces is the "
            f"point's rate, {int(successes)}/{int(seeds)} seeds")


def _thread_env(command: str) -> str:
    """The thread settings a sweep's runner gave each run (--threads N of the record's
    command, else 1), as the environment a one-run command must set."""
    threads = _option(command, r"--threads[ =](\d+)", "1")
    return f"OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} "


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
                            ["seed", "test_acc_pct", "duration_s"])


def _seed_one(runs: pd.DataFrame | None, row: pd.Series) -> pd.Series | None:
    """Seed 1's run of `row`'s sweep, task and attention in `runs`; None where there is no
    such file or row."""
    if runs is None:
        return None
    match = runs[(runs["sweep"] == row["sweep"]) & (runs["task"] == row["task"])
                 & (runs["attention"] == row["attention"]) & (runs["seed"] == 1)]
    return None if match.empty else match.iloc[0]


def _table_statistic(row: pd.Series) -> str:
    """What the training table shows of `row`: the median for recall tasks, else the mean."""
    if row["task"] in RECALL_TASKS and pd.notna(row.get("median_acc")):
        return f"median {100 * row['median_acc']:.1f}%"
    return f"mean {row['test_acc_pct_mean']:.2f}%"


def training_point(folder: Path) -> list[str]:
    """A run of each task: the first attention of its sweep, seed 1, with the sweep's settings
    and thread count, seed 1's own accuracy and duration where the per-run CSV has them (the
    command reproduces that on the machine it names), and the table's statistic over seeds."""
    table = training_csv(folder / "results.csv")
    runs = _sweep_runs(folder)
    env = _thread_env(load(folder).get("results.csv", {}).get("command", ""))
    lines = []
    for _, rows in table.groupby("task", sort=False):
        row = rows.iloc[0]
        settings = row["sweep"].split(": ", 1)[1] if ": " in row["sweep"] else ""
        command = env + " ".join(word for word in ("python train.py", settings,
                                                   f"attention={row['attention']}", "seed=1")
                                 if word)
        seed_one = _seed_one(runs, row)
        if seed_one is None:
            value = (f": test accuracy {row['test_acc_pct_mean']:.2f}% as the mean of "
                     f"{int(row['n'])} seeds in the table")
        else:
            value = (f", seed 1: test accuracy {seed_one['test_acc_pct']:.2f}% in "
                     f"results_runs.csv{_took(seed_one)}; the table's {int(row['n'])} seeds: "
                     f"{_table_statistic(row)}")
            if row["task"] in RECALL_TASKS:
                value += _elsewhere(row.get("successes"), row.get("n_seeds"))
        lines.append(_line(command, f"{row['task']}, {label(row['attention'])}{value}"))
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


def _shown(command: str) -> str:
    """A run's recorded command as a one-run line shows it: `logger=none` (the study runner's,
    to write no W&B run) dropped, the path of a checkpoint made relative to the repository."""
    command = command.replace(" logger=none", "")
    return re.sub(r"init_weights=\S*?/(outputs/\S+)", r"init_weights=\1", command)


def _run_point(row: pd.Series, start: str = "", rate: str = "") -> str:
    """What a one-run line reproduces: the run, its accuracy (then `start`, where it began),
    how long it took on which machine, and `rate` (what another CPU reproduces)."""
    conv = f"short conv {int(row['short_conv'])}" if row["short_conv"] else "no short conv"
    return (f"{label(row['attention'])}, d_model {int(row['d_model'])}, {conv}, seed "
            f"{int(row['seed'])}: {_accuracy(row['test_acc'])} in its runs CSV{start}"
            f"{_took(row)}{rate}")


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
    rate = _elsewhere(first["successes"], first["n_seeds"])
    return [_line(_shown(row["command"]), _run_point(row, rate=rate))]


def step_budget_point(folder: Path) -> list[str]:
    """The first of the longer runs. A tail's line is its own recorded command (its constant
    lr and the checkpoint it continues, the path made relative to the repository) and says
    where it started; a longer run's is the study's command with its max_steps."""
    runs = _runs(folder, "mqar_step_budget_runs.csv")
    if runs is None:
        return []
    row = runs.iloc[0]
    start = ""
    if "start_test_acc" in runs.columns:
        start = (f", continuing the study run of the checkpoint it names "
                 f"({_accuracy(row['start_test_acc'])}; `mqar_step_budget.py --retrain-study` "
                 "trains that run where it is gone)")
    return [_line(_shown(row["command"]), _run_point(row, start))]


def mixture_point(folder: Path) -> list[str]:
    """The first run and test setting of the mixture's runs CSV."""
    path = folder / "mqar_mixture_runs.csv"
    if not path.is_file():
        return []
    runs = read_csv_checked(path, ["attention", "seed", "length", "pairs", "acc"],
                            ["seed", "length", "pairs", "acc", "duration_s"])
    row = runs.iloc[0]
    command = row.get("command")
    if command is None or pd.isna(command):  # a row without its own command: the study's for it
        preset = _option(load(folder).get("mqar_mixture.csv", {}).get("command", ""),
                         r"experiment=([\w/]+)", "mqar_mixture_cpu")
        command = (f"python train.py experiment={preset} attention={row['attention']} "
                   f"seed={int(row['seed'])}")
    return [_line(_shown(command),
                  f"{label(row['attention'])}, seed {int(row['seed'])}: {_accuracy(row['acc'])} "
                  f"at L{int(row['length'])} P{int(row['pairs'])} in its runs CSV{_took(row)}")]


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
