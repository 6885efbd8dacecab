"""The MQAR mixture's report text (scripts/mqar_mixture.py's <name>.md): the caption (the preset's
mixture and settings, how n was decided, what is new past the training lengths, a PARTIAL mark
while the study is short of its seeds) and the table, a row per attention and kind of positions,
a column per test setting, from studies.mixture's rows and summary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from linarena.analysis.order import attention_label
from linarena.analysis.statistics import SUCCESS_THRESHOLD
from linarena.studies.mixture import BEYOND, get, wanted_seeds


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


def unfinished(runs: pd.DataFrame, study: Mapping[str, Any]) -> list[str]:
    """The (attention, positions) of `runs` short of the study's protocol (its `study:` block,
    mixture.wanted_seeds) for every attention found in the runs. One "<label> <positions>
    (seeds ...)" per row short of seeds; [] for a finished study."""
    present = runs.drop_duplicates(["attention", "positions", "seed"])
    have = present.groupby(["attention", "positions"])["seed"].agg(set)
    labels = dict(zip(runs["attention"], runs["label"], strict=False))
    short = []
    for (attention, positions), seeds in wanted_seeds(
            runs, dict.fromkeys(runs["attention"]), study).items():
        left = [seed for seed in seeds if seed not in have.get((attention, positions), set())]
        if left:
            short.append(f"{labels[attention]} {positions} (seeds {', '.join(map(str, left))})")
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


def _beyond_text(runs: pd.DataFrame) -> str:
    """What a model meets past the training lengths, for the kinds of positions in `runs`."""
    kinds = set(runs["positions"])
    coded = ", ".join(sorted(kinds - {"none"}))
    if "none" not in kinds:
        return f"the model meets positions it never trained on ({coded})"
    text = "with positions none, the model meets sequences longer than any it trained on"
    return text + (f"; with {coded}, positions it never trained on too" if coded else "")


def caption(runs: pd.DataFrame, config: Mapping[str, Any]) -> str:
    """What the table shows, above it in mqar_mixture.md; `config` is one run's summary.json
    "config" (every pooled run has the same mixture and settings)."""
    train, test = get(config, "data.train"), get(config, "data.test")
    longest = max(int(item["length"]) for item in train)
    stop = get(config, "callbacks.early_stopping.stopping_threshold")
    failed = runs[runs["acc"].isna()].drop_duplicates(["attention", "seed"])
    text = (f"MQAR trained on a mixture of (length, pairs) settings and tested per setting: "
            f"vocab {get(config, 'data.vocab_size')}, d_model {get(config, 'model.d_model')}, "
            f"{get(config, 'model.num_layers')} layers, lr {get(config, 'optim.lr'):g}, at "
            f"most {get(config, 'trainer.max_steps'):,} steps"
            + (f" (early stop at val acc {stop:g})" if stop is not None else "")
            + f"; {seeds_text(runs, config)}; {short_conv_text(runs)}. Training (examples): "
            f"{_settings_text(train)}. Test (examples "
            f"per setting): {_settings_text(test)}.\n\n"
            f"Each cell: median test accuracy (%) over seeds for that setting, and (k/n) the "
            f"seeds whose accuracy reached {100 * SUCCESS_THRESHOLD:.0f}%. {BEYOND}: the length "
            f"is beyond the longest training length ({longest}): {_beyond_text(runs)}.\n\n")
    short = unfinished(runs, config["study"]) if config.get("study") else []
    if short:
        text = (f"PARTIAL: the study has not finished; rows short of seeds: {'; '.join(short)}."
                "\n\n" + text)
    if len(failed):
        text += (f"{len(failed)} run(s) have no accuracy for some setting (diverged): counted "
                 "in n, never in k, and left out of the median.\n\n")
    return text
