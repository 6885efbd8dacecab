"""The MQAR mixture study: accuracy per test setting (length, pairs) across attentions and seeds.

Its grid is a train.py multirun (experiment=mqar_mixture(_cpu), attentions x seeds), its
protocol POOLED_ON. Its runs train on a mixture of (length, pairs) settings and write, per test
setting, test/acc_L<length>_P<pairs> into summary.json's "metrics"
(linarena.metrics.TEST_ACC_PER_SETTING). This module reads every such run under some folders
into one row per (run, test setting), then summarises each (attention, setting) over seeds: the
median accuracy, its range, how many seeds reached SUCCESS_THRESHOLD and that rate's interval
(statistics.point_statistics); studies.mixture_report writes that as a table with a row per
attention and a column per setting. Settings longer than the longest training length are marked
†: there the model meets sequences longer than any it trained on (and, with position codes,
positions it never trained on).

Runs are pooled only when they trained and tested on one mixture, at one width, depth, learning
rate and step budget (only the attention, the kind of positions and the seed may differ); each
(attention, positions) is a row of the table (the question: where does length generalisation
appear without absolute position codes, model.positions=none or rope?).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.order import attention_label, attention_sort_key
from linarena.analysis.runs import RunRecord, read_run
from linarena.analysis.statistics import STATISTICS_COLUMNS, SUCCESS_THRESHOLD, point_statistics
from linarena.metrics import TEST_ACC_PER_SETTING
from linarena.studies.runs import train_command
from linarena.training.summary import SUMMARY_FILE

RUN_COLUMNS = ("attention", "label", "positions", "short_conv", "seed", "length", "pairs", "acc",
               "beyond_train", "run", "commit", "duration_s", "cpu", "cpu_kernels", "command")
SUMMARY_COLUMNS = ("attention", "label", "positions", "length", "pairs", "beyond_train", "seeds",
                   "failed",
                   "recalled", "test_acc_median", "test_acc_min", "test_acc_max",
                   *STATISTICS_COLUMNS)
# What must be equal for runs to be pooled (dotted paths in summary.json's "config").
POOLED_ON = ("data.train", "data.test", "data.vocab_size", "model.d_model", "model.num_layers",
             "optim.lr", "trainer.max_steps")
# The rest of the config the caption reads.
CAPTION_ON = ("callbacks.early_stopping.stopping_threshold", "study")
BEYOND = "†"


def get(config: Mapping[str, Any], dotted: str) -> Any:
    """The value at a dotted key ("model.d_model") of a nested config; None where absent."""
    for key in dotted.split("."):
        config = config.get(key) if isinstance(config, Mapping) else None
    return config


def run_rows(folder: Path, record: RunRecord) -> list[dict[str, Any]]:
    """The rows of one run (its summary.json as linarena.analysis.runs reads it): one per test
    setting, [] for a run without per-setting metrics."""
    if not record.setting_accuracies:
        return []
    config = record.config or {}
    train = get(config, "data.train")
    if not train:
        raise ValueError(f"{folder / SUMMARY_FILE}: per-setting metrics but no config.data.train "
                         "(the training mixture); was it written by linarena's train.py?")
    longest = max(int(item["length"]) for item in train)
    positions = str(get(config, "model.positions"))
    return [{"attention": record.attention, "label": attention_label(record.attention),
             "positions": positions, "short_conv": get(config, "model.short_conv"),
             "seed": record.seed, "length": length, "pairs": pairs, "acc": acc,
             "beyond_train": length > longest,
             "run": f"{folder.parent.name}/{folder.name}", "commit": record.commit,
             "duration_s": record.duration_s, "cpu": record.cpu,
             "cpu_kernels": record.cpu_kernels, "command": train_command(folder, record.env)}
            for (length, pairs), acc in sorted(record.setting_accuracies.items())]


def pooled_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The POOLED_ON values of a resolved config (summary.json's "config", or a preset's)."""
    return {key: get(config, key) for key in POOLED_ON}


def _check_poolable(settings: dict[str, dict[str, Any]]) -> None:
    """A ValueError naming two sources (run folders, or the preset) whose runs differ in a
    POOLED_ON key, and the key."""
    (first, reference), *others = settings.items()
    for folder, values in others:
        for key in POOLED_ON:
            if values[key] != reference[key]:
                what = "mixtures" if key.startswith(("data.train", "data.test")) else "settings"
                raise ValueError(
                    f"runs with different {what} cannot be pooled: {key} is {values[key]} in "
                    f"{folder} but {reference[key]} in {first}; point --runs at the runs of "
                    "one preset and setting")


def load_runs(roots: Iterable[str | Path], reference: Mapping[str, Any] | None = None,
              ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per (run, test setting) of every non-debug run with per-setting accuracies
    (test/acc_L<length>_P<pairs>) under `roots`, in RUN_COLUMNS, attentions in registry order;
    and the first run's resolved config (summary.json "config"), whose POOLED_ON settings every
    run shares (and `reference`'s, where given: the preset's config that archived runs were
    trained with)."""
    roots = [Path(root) for root in roots]
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"--runs {root}: no such folder")
    rows, seen, configs = [], {}, []
    settings = {} if reference is None else {"the preset": pooled_settings(reference)}
    for path in sorted(p for root in roots for p in root.rglob(SUMMARY_FILE)):
        record = read_run(path, required=False)
        if record.debug:
            continue
        found = run_rows(path.parent, record)
        if not found:
            continue
        key = (found[0]["attention"], found[0]["positions"], found[0]["seed"])
        if key in seen:
            raise ValueError(f"attention {key[0]} with positions {key[1]}, seed {key[2]}, ran "
                             f"twice: {seen[key]} and {path.parent}; keep one of them out of "
                             "--runs")
        seen[key] = path.parent
        settings[str(path.parent)] = pooled_settings(record.config)
        configs.append(record.config)
        rows += found
    if not rows:
        raise ValueError(f"no run with per-setting accuracies ({TEST_ACC_PER_SETTING.key}"
                         f"L<length>_P<pairs>) under {', '.join(map(str, roots))}: train with "
                         "experiment=mqar_mixture_cpu (debug runs are left out)")
    _check_poolable(settings)
    return sort_runs(pd.DataFrame(rows, columns=list(RUN_COLUMNS))), configs[0]


def sort_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs rows (RUN_COLUMNS) by attention in registry order, positions, seed and setting."""
    runs = runs.sort_values(["attention", "positions", "seed", "length", "pairs"],
                            kind="stable", key=_registry_key)
    return runs.reset_index(drop=True)


def _registry_key(column: pd.Series) -> pd.Series:
    """Sort key of a column: attentions by their rank in the registry's order."""
    if column.name != "attention":
        return column
    ranks = {name: rank for rank, name in enumerate(sorted(set(column), key=attention_sort_key))}
    return column.map(ranks)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (attention, positions, test setting), in SUMMARY_COLUMNS: seeds, the seeds whose
    run diverged (no accuracy: counted among the seeds, never as recalling), the seeds that reached
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


def wanted_seeds(runs: pd.DataFrame, attentions: Iterable[str], study: Mapping[str, Any]
                 ) -> dict[tuple[str, str], list[int]]:
    """The study's protocol (its `study:` block: positions, seeds, more_seeds) for each of
    `attentions` at each kind of positions: the seeds of `seeds`, and those of `more_seeds`
    where the finished `runs` of `seeds` split (split_rows)."""
    seeds, more = [int(s) for s in study["seeds"]], [int(s) for s in study.get("more_seeds") or []]
    split = split_rows(runs, seeds)
    return {(attention, str(positions)): seeds + (more if (attention, str(positions)) in split
                                                   else [])
            for attention in attentions for positions in study["positions"]}

