"""The MQAR mixture study: accuracy per test setting (length, pairs) across attentions and seeds.

Its grid is a train.py multirun (experiment=mqar_mixture(_cpu), attentions x seeds), its
protocol POOLED_ON. Its runs train on a mixture of (length, pairs) settings and write, per test
setting, test/acc_L<length>_P<pairs> into summary.json's "metrics"
(linarena.metrics.TEST_ACC_PER_SETTING). This module reads every such run under some folders
into one row per (run, test setting), then summarises each (attention, setting) over seeds: the
median accuracy, its range, how many seeds reached SUCCESS_THRESHOLD and that rate's interval
(statistics.point_statistics), as a table with a row per attention and a column per setting.
Settings longer than the longest training length are marked †: there the model meets positions
it never trained on.

Runs are pooled only when they trained and tested on one mixture, at one width, depth, learning
rate and step budget (only the attention, the kind of positions and the seed may differ); each
(attention, positions) is a row of the table (issue #28: where does length generalisation
appear without absolute position codes, model.positions=none or rope?).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.order import attention_label, attention_sort_key
from linarena.analysis.runs import parse_summary_file, schema_version
from linarena.metrics import TEST_ACC_PER_SETTING
from linarena.studies.runs import train_command
from linarena.studies.statistics import STATISTICS_COLUMNS, SUCCESS_THRESHOLD, point_statistics
from linarena.training.summary import SUMMARY_FILE

RUN_COLUMNS = ("attention", "label", "positions", "short_conv", "seed", "length", "pairs", "acc",
               "beyond_train", "run", "commit", "duration_s", "cpu", "cpu_kernels", "command")
SUMMARY_COLUMNS = ("attention", "label", "positions", "length", "pairs", "beyond_train", "seeds",
                   "failed",
                   "recalled", "test_acc_median", "test_acc_min", "test_acc_max",
                   *STATISTICS_COLUMNS)
SETTING = re.compile(re.escape(TEST_ACC_PER_SETTING.key) + r"L(?P<length>\d+)_P(?P<pairs>\d+)$")
# What must be equal for runs to be pooled (dotted paths in summary.json's "config").
POOLED_ON = ("data.train", "data.test", "data.vocab_size", "model.d_model", "model.num_layers",
             "optim.lr", "trainer.max_steps")
BEYOND = "†"


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def _setting_accuracies(metrics: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """{(length, pairs): accuracy (NaN where the run diverged)} of a summary's metrics."""
    found = {}
    for key, value in metrics.items():
        match = SETTING.match(key)
        if match:
            found[int(match["length"]), int(match["pairs"])] = \
                float("nan") if value is None else float(value)
    return found


def _read(path: Path) -> dict[str, Any]:
    summary = parse_summary_file(path)
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: not a linarena summary.json (not a JSON object)")
    return summary


def run_rows(folder: Path, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of one run: one per test setting, [] for a run without per-setting metrics."""
    where = folder / SUMMARY_FILE
    for key in ("attention", "seed", "metrics"):
        if key not in summary:
            raise ValueError(f"{where}: key {key!r} is missing (is this a linarena summary.json?)")
    schema_version(summary, str(where))
    accuracies = _setting_accuracies(summary["metrics"])
    if not accuracies:
        return []
    train = _get(summary.get("config") or {}, "data.train")
    if not train:
        raise ValueError(f"{where}: per-setting metrics but no config.data.train (the training "
                         "mixture); was it written by linarena's train.py?")
    longest = max(int(item["length"]) for item in train)
    attention = str(summary["attention"])
    positions = str(_get(summary["config"], "model.positions"))
    machine = summary.get("machine") or {}
    return [{"attention": attention, "label": attention_label(attention),
             "positions": positions, "short_conv": _get(summary["config"], "model.short_conv"),
             "seed": int(summary["seed"]), "length": length, "pairs": pairs, "acc": acc,
             "beyond_train": length > longest,
             "run": f"{folder.parent.name}/{folder.name}", "commit": summary.get("commit"),
             "duration_s": summary.get("duration_s"), "cpu": machine.get("cpu"),
             "cpu_kernels": machine.get("cpu_kernels"), "command": train_command(folder)}
            for (length, pairs), acc in sorted(accuracies.items())]


def _check_poolable(settings: dict[Path, dict[str, Any]]) -> None:
    """A ValueError naming two folders whose runs differ in a POOLED_ON key, and the key."""
    (first, reference), *others = settings.items()
    for folder, values in others:
        for key in POOLED_ON:
            if values[key] != reference[key]:
                what = "mixtures" if key.startswith(("data.train", "data.test")) else "settings"
                raise ValueError(
                    f"runs with different {what} cannot be pooled: {key} is {values[key]} in "
                    f"{folder} but {reference[key]} in {first}; point --runs at the runs of "
                    "one preset and setting")


def load_runs(roots: Iterable[str | Path]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per (run, test setting) of every non-debug run with per-setting accuracies
    (test/acc_L<length>_P<pairs>) under `roots`, in RUN_COLUMNS, attentions in registry order;
    and the first run's resolved config (summary.json "config"), whose POOLED_ON settings every
    run shares."""
    roots = [Path(root) for root in roots]
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"--runs {root}: no such folder")
    rows, settings, seen, configs = [], {}, {}, []
    for path in sorted(p for root in roots for p in root.rglob(SUMMARY_FILE)):
        summary = _read(path)
        if summary.get("debug"):
            continue
        found = run_rows(path.parent, summary)
        if not found:
            continue
        key = (found[0]["attention"], found[0]["positions"], found[0]["seed"])
        if key in seen:
            raise ValueError(f"attention {key[0]} with positions {key[1]}, seed {key[2]}, ran "
                             f"twice: {seen[key]} and {path.parent}; keep one of them out of "
                             "--runs")
        seen[key] = path.parent
        settings[path.parent] = {k: _get(summary["config"], k) for k in POOLED_ON}
        configs.append(summary["config"])
        rows += found
    if not rows:
        raise ValueError(f"no run with per-setting accuracies ({TEST_ACC_PER_SETTING.key}"
                         f"L<length>_P<pairs>) under {', '.join(map(str, roots))}: train with "
                         "experiment=mqar_mixture_cpu (debug runs are left out)")
    _check_poolable(settings)
    runs = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    runs = runs.sort_values(["attention", "positions", "seed", "length", "pairs"],
                            kind="stable", key=_registry_key)
    return runs.reset_index(drop=True), configs[0]


def _registry_key(column: pd.Series) -> pd.Series:
    """Sort key of a column: attentions by their rank in the registry's order."""
    if column.name != "attention":
        return column
    ranks = {name: rank for rank, name in enumerate(sorted(set(column), key=attention_sort_key))}
    return column.map(ranks)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (attention, positions, test setting), in SUMMARY_COLUMNS: seeds, the seeds whose run
    diverged (no accuracy: counted among the seeds, never as recalling), the seeds that reached
    SUCCESS_THRESHOLD, the median, min and max accuracy over the others, then the
    STATISTICS_COLUMNS (success rate with its Wilson interval)."""
    rows = []
    for (attention, positions, length, pairs), group in runs.groupby(
            ["attention", "positions", "length", "pairs"], sort=False):
        acc = group["acc"]
        stats = point_statistics(acc)
        rows.append({
            "attention": attention, "label": group["label"].iloc[0], "positions": positions,
            "length": length,
            "pairs": pairs, "beyond_train": bool(group["beyond_train"].iloc[0]),
            "seeds": stats["n_seeds"], "failed": int(acc.isna().sum()),
            "recalled": stats["successes"], "test_acc_median": stats["median_acc"],
            "test_acc_min": stats["min_acc"], "test_acc_max": stats["max_acc"],
            **{column: stats[column] for column in STATISTICS_COLUMNS},
        })
    summary = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    summary = summary.sort_values(["attention", "positions", "length", "pairs"],
                                  kind="stable", key=_registry_key)
    return summary.reset_index(drop=True)


def setting_header(length: int, pairs: int, beyond: bool) -> str:
    """A column header: "L256 P64", with † when the length is beyond the training lengths."""
    return f"L{length} P{pairs}" + (f" {BEYOND}" if beyond else "")


def accuracy_table(summary: pd.DataFrame) -> str:
    """Markdown: a row per attention (registry order) and kind of positions, a column per test
    setting (by length, then pairs); each cell the median accuracy % over seeds and (k/n) the
    seeds that reached SUCCESS_THRESHOLD, e.g. "98.9 (2/3)"; "–" where there is no accuracy."""
    settings = summary[["length", "pairs", "beyond_train"]].drop_duplicates()
    settings = settings.sort_values(["length", "pairs"])
    columns = list(zip(settings["length"], settings["pairs"], strict=True))
    cells = {(row.attention, row.positions, row.length, row.pairs):
             ("–" if pd.isna(row.test_acc_median) else f"{100 * row.test_acc_median:.1f}")
             + f" ({row.recalled}/{row.seeds})" for row in summary.itertuples()}
    header = ["attention", "positions", *(setting_header(length, pairs, beyond)
                                          for length, pairs, beyond
                                          in settings.itertuples(index=False))]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for attention, positions in dict.fromkeys(zip(summary["attention"], summary["positions"],
                                                  strict=True)):
        values = [cells.get((attention, positions, length, pairs), "–")
                  for length, pairs in columns]
        lines.append(f"| {attention_label(attention)} | {positions} | " + " | ".join(values)
                     + " |")
    return "\n".join(lines) + "\n"


def _settings_text(items: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(f"L{item['length']} P{item['pairs']} ({item['examples']:,})"
                     for item in items)


def short_conv_text(runs: pd.DataFrame) -> str:
    """Which short conv the runs had: the preset's (model.short_conv) for most, none for the
    layers with their own short convolutions (mixture_study.own_conv_entries)."""
    by_conv = runs.drop_duplicates("run").dropna(subset=["short_conv"]).groupby(
        "short_conv")["label"].agg(lambda labels: sorted(set(labels)))
    if by_conv.empty:  # runs whose config does not say
        return "short conv not recorded"
    if len(by_conv) == 1:
        taps = int(by_conv.index[0])
        return f"short conv {taps} (model.short_conv)" if taps else "no short conv"
    own = ", ".join(by_conv.get(0, []))
    return (f"short conv {int(by_conv.index.max())} before each attention (model.short_conv), "
            f"but none for {own} (their own short convolutions instead)")


def split_rows(runs: pd.DataFrame, seeds: Sequence[int]) -> set[tuple[str, str]]:
    """The (attention, positions) whose runs of `seeds` split at some test setting:
    0 < successes < n."""
    runs = runs[runs["seed"].isin(seeds)]
    split = set()
    for (attention, positions, _, _), group in runs.groupby(
            ["attention", "positions", "length", "pairs"]):
        successes = int((group["acc"] >= SUCCESS_THRESHOLD).sum())
        if 0 < successes < len(group):
            split.add((attention, positions))
    return split


def unfinished(runs: pd.DataFrame, study: Mapping[str, Any]) -> list[str]:
    """The (attention, positions) of `runs` short of the study's protocol (its `study:` block):
    every attention found in the runs, at each of the study's positions, needs the seeds of
    `seeds`, and those of `more_seeds` where they split (split_rows). One "<label> <positions>
    (seeds ...)" per row short of seeds; [] for a finished study."""
    seeds, more = [int(s) for s in study["seeds"]], [int(s) for s in study.get("more_seeds") or []]
    split = split_rows(runs, seeds)
    present = runs.drop_duplicates(["attention", "positions", "seed"])
    labels = dict(zip(runs["attention"], runs["label"], strict=False))
    short = []
    for attention in dict.fromkeys(runs["attention"]):
        for positions in study["positions"]:
            wanted = seeds + (more if (attention, str(positions)) in split else [])
            have = set(present.loc[(present["attention"] == attention)
                                   & (present["positions"] == str(positions)), "seed"])
            left = [seed for seed in wanted if seed not in have]
            if left:
                short.append(f"{labels[attention]} {positions} (seeds "
                             f"{', '.join(map(str, left))})")
    return short


def seeds_text(runs: pd.DataFrame, config: Mapping[str, Any]) -> str:
    """How n was decided: the study's protocol when the runs were trained by
    scripts/mqar_mixture.py (their config's `study:` block), else the seeds found."""
    study = config.get("study")
    if not study:
        return f"seeds {sorted(int(seed) for seed in set(runs['seed']))}"
    more = list(study.get("more_seeds") or [])
    return (f"seeds {list(study['seeds'])} for every attention and positions"
            + (f", and {more} where those split at some test setting (some reached "
               f"{100 * SUCCESS_THRESHOLD:.0f}% and some did not)" if more else ""))


def caption(runs: pd.DataFrame, config: Mapping[str, Any]) -> str:
    """What the table shows, above it in mqar_mixture.md; `config` is one run's summary.json
    "config" (every pooled run has the same mixture and settings)."""
    train, test = _get(config, "data.train"), _get(config, "data.test")
    longest = max(int(item["length"]) for item in train)
    stop = _get(config, "callbacks.early_stopping.stopping_threshold")
    failed = runs[runs["acc"].isna()].drop_duplicates(["attention", "seed"])
    text = (f"MQAR trained on a mixture of (length, pairs) settings and tested per setting: "
            f"vocab {_get(config, 'data.vocab_size')}, d_model {_get(config, 'model.d_model')}, "
            f"{_get(config, 'model.num_layers')} layers, lr {_get(config, 'optim.lr'):g}, at "
            f"most {_get(config, 'trainer.max_steps'):,} steps"
            + (f" (early stop at val acc {stop:g})" if stop is not None else "")
            + f"; {seeds_text(runs, config)}; {short_conv_text(runs)}. Training (examples): "
            f"{_settings_text(train)}. Test (examples "
            f"per setting): {_settings_text(test)}.\n\n"
            f"Each cell: median test accuracy (%) over seeds for that setting, and (k/n) the "
            f"seeds whose accuracy reached {100 * SUCCESS_THRESHOLD:.0f}%. {BEYOND}: the length "
            f"is beyond the longest training length ({longest}), so the model meets positions "
            "it never trained on.\n\n")
    short = unfinished(runs, config["study"]) if config.get("study") else []
    if short:
        text = (f"PARTIAL: the study has not finished; rows short of seeds: {'; '.join(short)}."
                "\n\n" + text)
    if len(failed):
        text += (f"{len(failed)} run(s) have no accuracy for some setting (diverged): counted "
                 "in n, never in k, and left out of the median.\n\n")
    return text
