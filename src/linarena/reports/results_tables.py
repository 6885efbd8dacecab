"""The published result tables, generated from the CSVs of docs/results/ (never hand-copied).

Each table sits on a page of the documentation (PAGES: the results page, the getting-started
page, and the README's summary) between `<!-- results:<name> -->` and
`<!-- /results:<name> -->`;
`write_tables` replaces what is between the markers with the table made from its source files,
preceded by a short caption (command, commit, machine, date: linarena.analysis.results_captions)
and, when a source file is marked stale in provenance.json, a stale mark with the commit and the
reason; followed by the command of one run that reproduces one published point
(linarena.reports.results_points). A table whose source files are not there yet (a study not
run) is one line saying so and what makes them. Every CSV is read whole or refused
(linarena.analysis.result_files): a damaged source stops the update before any page changes.
The README's `headline` block (SUMMARIES) is a summary of the results page's tables, made from
the same CSVs, so its numbers cannot differ from theirs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR, REPO_ROOT, load
from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.results_captions import caption_lines
from linarena.analysis.statistics import RECALL_TASKS, SUCCESS_THRESHOLD
from linarena.attention.variants import label
from linarena.files import write_text_atomic
from linarena.reports.results_points import (
    POINTS,
    REFERENCE_LABELS,
    attention_csv,
    benchmark_flags,
    model_csv,
    training_csv,
)

ERROR_LABELS = {"performer": "linarena", "performer_pytorch": "performer-pytorch",
                "performer_pytorch_eps0": "performer-pytorch, eps=0",
                "mean_of_v": "mean of v (uniform attention)"}


def number(value: float) -> str:
    """The tables' style: one decimal below 100, whole numbers with thousands separators above."""
    if pd.isna(value):
        return "–"
    return f"{value:.1f}" if abs(value) < 100 else f"{value:,.0f}"


def _name(variant: str) -> str:
    return REFERENCE_LABELS.get(variant) or label(variant)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def by_length(table: pd.DataFrame, name: str, values: str, unit: str) -> str:
    """A row per attention (in the CSV's order), a column per length: `values` in `unit`."""
    cells = table.pivot(index=name, columns="length", values=values)
    rows = [[_name(a), *(number(cells.loc[a, n]) for n in cells.columns)]
            for a in dict.fromkeys(table[name])]
    return markdown([unit, *(f"N={n}" for n in cells.columns)], rows)


def attention_table(folder: Path, source: str = "benchmark_attention.csv") -> str:
    """Forward + backward ms per variant (rows) and length (columns) of one benchmark run
    (bidirectional, or causal with benchmark_attention_causal.csv)."""
    return by_length(attention_csv(folder / source), "variant", "fwd_bwd_ms", "fwd+bwd ms")


def performer_error_table(folder: Path) -> str:
    """Mean |out - exact| of each estimator per input kind and q, k scale."""
    path = folder / "benchmark_attention_performer_error.csv"
    read = read_csv_checked(path, ["inputs", "length", "qk_scale"]).columns
    columns = [c for c in read if c not in ("inputs", "length", "qk_scale")]
    table = read_csv_checked(path, numeric_columns=["length", "qk_scale", *columns])
    header = ["inputs", "q, k scale", *(ERROR_LABELS.get(c, c) for c in columns)]
    rows = [[row["inputs"], f"{row['qk_scale']:g}", *(f"{row[c]:.4f}" for c in columns)]
            for _, row in table.iterrows()]
    return markdown(header, rows)


def model_table(folder: Path) -> str:
    """Tokens/s of a full training step, then its peak MB, per attention (rows) and length."""
    table = model_csv(folder / "benchmark_model.csv")
    step = table[table["what"] == "model_step"]
    return (by_length(step, "attention", "tokens_per_sec", "tokens/s") + "\n\n"
            + by_length(step, "attention", "peak_memory_mb", "peak MB"))


def training_table(folder: Path) -> str:
    """The small-budget sweeps: tokens/s, peak memory and the test accuracy over seeds, as
    mean ± std, or for RECALL_TASKS (an outcome that can go either way) as the seeds at the
    threshold with the rate's 95% Wilson interval and the median (min-max); a table each."""
    table = training_csv(folder / "results.csv")
    recall = table["task"].isin(RECALL_TASKS) & ("successes" in table.columns)
    speed = ["tokens/s", "peak memory (MB)"]

    def measured(row: pd.Series) -> list[str]:
        return [number(row["tokens_per_sec_mean"]), number(row["peak_memory_mb_mean"])]

    parts = []
    if (~recall).any():
        rows = [[row["task"], _name(row["attention"]), str(int(row["n"])),
                 f"{row['test_acc_pct_mean']:.2f} ± {row['test_acc_pct_std']:.2f}",
                 *measured(row)] for _, row in table[~recall].iterrows()]
        parts.append(markdown(["task", "attention", "seeds", "test acc (%)", *speed], rows))
    if recall.any():
        threshold = f"{100 * SUCCESS_THRESHOLD:.0f}%"
        rows = [[row["task"], _name(row["attention"]),
                 f"{int(row['successes'])}/{int(row['n_seeds'])}",
                 f"{100 * row['success_ci_low']:.0f}–{100 * row['success_ci_high']:.0f}",
                 f"{100 * row['median_acc']:.1f} ({100 * row['min_acc']:.1f}–"
                 f"{100 * row['max_acc']:.1f})", *measured(row)]
                for _, row in table[recall].iterrows()]
        parts.append(markdown(["task", "attention", f"seeds at {threshold}",
                               "rate, 95% interval (%)", "test acc (%): median (min–max)",
                               *speed], rows))
    return "\n\n".join(parts)


def default_run_table(folder: Path) -> str:
    """The Quick start's default run, timed from nothing (scripts/maintainer/default_run.py)."""
    table = read_csv_checked(folder / "default_run.csv",
                             ["command", "wall_s", "peak_rss_mb", "tokens_per_sec",
                              "test_acc_pct", "steps", "load_avg_1min_before"],
                             ["wall_s", "peak_rss_mb", "tokens_per_sec", "test_acc_pct", "steps",
                              "load_avg_1min_before"])
    rows = [[f"`{row['command']}`", f"{row['wall_s']:.0f}", number(row["peak_rss_mb"]),
             number(row["tokens_per_sec"]), f"{row['test_acc_pct']:.1f}", str(int(row["steps"])),
             f"{row['load_avg_1min_before']:.2f}"] for _, row in table.iterrows()]
    return markdown(["command", "wall time (s), data generation included", "peak RSS (MB)",
                     "tokens/s", "test acc (%)", "steps", "load average before"], rows)


def written_table(markdown_file: str) -> Callable[[Path], str]:
    """A table a report script wrote whole, caption and cells, from its CSV (mqar_study.py,
    mqar_step_budget.py, mqar_mixture.py): the page takes that file as it is."""
    return lambda folder: (folder / markdown_file).read_text().strip()


# name -> (source files, table maker)
TABLES: dict[str, tuple[tuple[str, ...], Callable[[Path], str]]] = {
    "default_run": (("default_run.csv",), default_run_table),
    "attention": (("benchmark_attention.csv",), attention_table),
    "attention_causal": (("benchmark_attention_causal.csv",),
                         lambda folder: attention_table(folder, "benchmark_attention_causal.csv")),
    "performer_error": (("benchmark_attention_performer_error.csv",), performer_error_table),
    "model": (("benchmark_model.csv",), model_table),
    "training": (("results.csv",), training_table),
    "mqar_state_size": (("mqar_state_size.csv", "mqar_state_size.md"),
                        written_table("mqar_state_size.md")),
    "mqar_step_budget": (("mqar_step_budget.csv", "mqar_step_budget.md"),
                         written_table("mqar_step_budget.md")),
    "mqar_mixture": (("mqar_mixture.csv", "mqar_mixture.md"), written_table("mqar_mixture.md")),
}
# name -> the scripts/maintainer/reproduce_results.sh stage that writes its source files.
STAGES = {"default_run": "quickstart", "attention": "bench", "attention_causal": "bench",
          "performer_error": "bench", "model": "bench", "training": "sweeps",
          "mqar_state_size": "study", "mqar_step_budget": "study", "mqar_mixture": "mixture"}


def headline_table(folder: Path) -> str:
    """The README's summary, one row per attention: ListOps accuracy (mean ± std over seeds),
    MQAR seeds at the threshold, and the training step's tokens/s at the longest benchmarked
    length as a multiple of softmax's, each from the table of the results page it summarises."""
    sweeps = training_csv(folder / "results.csv")
    step = model_csv(folder / "benchmark_model.csv")
    step = step[step["what"] == "model_step"]
    longest = int(step["length"].max())
    speed = step[step["length"] == longest].set_index("attention")["tokens_per_sec"]
    listops = sweeps[~sweeps["task"].isin(RECALL_TASKS)].set_index("attention")
    recall = sweeps[sweeps["task"].isin(RECALL_TASKS)].set_index("attention")
    threshold = f"{100 * SUCCESS_THRESHOLD:.0f}%"
    rows = []
    for attention in dict.fromkeys([*sweeps["attention"], *speed.index]):
        accuracy = (f"{listops.loc[attention, 'test_acc_pct_mean']:.1f} ± "
                    f"{listops.loc[attention, 'test_acc_pct_std']:.1f}"
                    if attention in listops.index else "–")
        recalled = (f"{int(recall.loc[attention, 'successes'])}/"
                    f"{int(recall.loc[attention, 'n_seeds'])}"
                    if attention in recall.index and "successes" in recall.columns else "–")
        ratio = (f"{speed[attention] / speed['softmax']:.1f}x"
                 if attention in speed.index and "softmax" in speed.index else "–")
        rows.append([_name(attention), accuracy, recalled, ratio])
    tasks = ", ".join(dict.fromkeys(listops["task"].tolist() + recall["task"].tolist()))
    return markdown(["attention", "ListOps test acc (%), short, 10 seeds",
                     f"MQAR seeds at {threshold}", f"training speed at N={longest:,} vs softmax"],
                    rows) + (f"\n\nSmall budgets on a 2-core CPU ({tasks}): read the spreads, the "
                             "pair tests and the limits on [the results page](docs/results.md) "
                             "before ranking two rows.")


# The README's summaries of the results page: name -> (source files, table maker), rendered with
# the captions of their sources and no one-run line (each row is a table of the results page).
SUMMARIES: dict[str, tuple[tuple[str, ...], Callable[[Path], str]]] = {
    "headline": (("results.csv", "benchmark_model.csv"), headline_table),
}
SUMMARY_STAGES = {"headline": "sweeps"}
# The files that hold generated blocks, relative to the repository's root.
PAGES = ("README.md", "docs/getting-started.md", "docs/results.md")


def render(name: str, folder: Path = PUBLISHED_DIR) -> str:
    """The text between the markers of table `name`: caption, table, one-run command."""
    if name in SUMMARIES:
        return _render_summary(name, folder)
    sources, make = TABLES[name]
    missing = [source for source in sources if not (folder / source).is_file()]
    if missing:
        files = ", ".join(f"docs/results/{source}" for source in missing)
        return (f"\nNot run yet ({files} missing): `bash scripts/maintainer/reproduce_results.sh "
                f"{STAGES[name]}`\n")
    for source in sources:
        if source.endswith(".csv"):
            read_csv_checked(folder / source)  # a damaged source stops here, whatever reads it
    lines = caption_lines(sources, load(folder), STAGES[name], benchmark_flags(name, folder))
    points = "\n\n".join(POINTS[name](folder))  # a paragraph each
    return "\n".join(["", *lines, "", make(folder), *(["", points] if points else []), ""])


def _render_summary(name: str, folder: Path) -> str:
    sources, make = SUMMARIES[name]
    missing = [source for source in sources if not (folder / source).is_file()]
    if missing:
        files = ", ".join(f"docs/results/{source}" for source in missing)
        return (f"\nNot run yet ({files} missing): `bash scripts/maintainer/reproduce_results.sh "
                f"{SUMMARY_STAGES[name]}`\n")
    for source in sources:
        read_csv_checked(folder / source)
    lines = caption_lines(sources, load(folder), SUMMARY_STAGES[name])
    return "\n".join(["", make(folder), "", *lines, ""])


def fill(text: str, folder: Path = PUBLISHED_DIR) -> tuple[str, list[str]]:
    """`text` with every marked block made again from `folder`, and the names of the blocks."""
    done = []
    for name in [*TABLES, *SUMMARIES]:
        pattern = re.compile(rf"(<!-- results:{name} -->)(.*?)(<!-- /results:{name} -->)",
                             re.DOTALL)
        if pattern.search(text):
            body = render(name, folder)
            text = pattern.sub(lambda match, body=body: match[1] + body + match[3], text)
            done.append(name)
    return text, done


def write_tables(page: Path, folder: Path = PUBLISHED_DIR) -> list[str]:
    """Replace every marked table of `page`; returns the names replaced."""
    text, done = fill(page.read_text(), folder)
    write_text_atomic(page, text)
    return done


def default_pages(root: Path = REPO_ROOT) -> list[Path]:
    """The pages that hold the generated blocks (PAGES), under `root`."""
    return [root / page for page in PAGES]


def write_pages(pages: list[Path], folder: Path = PUBLISHED_DIR) -> dict[Path, list[str]]:
    """Every page made again from `folder`, all or none: every table is rendered (a damaged
    source stops here, before any page changes), then each page is written. Returns the names
    written per page; a table of TABLES that no page holds is an error."""
    filled = {page: fill(page.read_text(), folder) for page in pages}
    placed = [name for _, names in filled.values() for name in names]
    unplaced = [name for name in TABLES if name not in placed]
    if unplaced and set(pages) >= set(default_pages()):
        raise ValueError(f"no page holds the table(s) {', '.join(unplaced)}: add "
                         "<!-- results:NAME --><!-- /results:NAME --> where each belongs")
    for page, (text, _) in filled.items():
        write_text_atomic(page, text)
    return {page: names for page, (_, names) in filled.items()}
