"""How much a card asks for, before it starts: its sections per --budget, and the CPU-hours the
training left will take, estimated from the published duration_s of comparable runs (the same
protocol and width, the same kind of variant: a whole layer or a core), as a range: the runs
known to be left, and at most (every point's seeds split, so more seeds are added)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.arena.subject import Subject
from linarena.arena.training import state_size_columns
from linarena.attention.variants import is_layer
from linarena.studies.seed_sweep import LISTOPS_THREADS
from linarena.training.summary import SUMMARY_FILE

SECTIONS = ("certificate", "cost", "state_size", "listops", "mixture")


@dataclass(frozen=True)
class Budget:
    """What a --budget runs: its sections, the cost's lengths, the state-size widths and
    short-conv settings (None: the preset's; "first": the first setting the subject trains
    at), the ListOps seeds."""

    sections: tuple[str, ...]
    lengths: tuple[int, ...]
    widths: tuple[int, ...]
    short_convs: str | tuple[int, ...] | None
    listops_seeds: tuple[int, ...] = field(default=tuple(range(1, 11)))


BUDGETS = {
    # The certificate, the cost to 4K, and MQAR recall at the smallest width with one conv
    # setting: about half an hour of one core.
    "quick": Budget(("certificate", "cost", "state_size"), (1024, 2048, 4096), (16,), "first"),
    "standard": Budget(SECTIONS[:4], (1024, 2048, 4096, 8192, 16384), (16, 32), None),
    "full": Budget(SECTIONS, (1024, 2048, 4096, 8192, 16384), (16, 32, 64), None),
}


def _kind_mean(durations: pd.DataFrame, subject: Subject) -> float:
    """The mean duration_s of the published runs of the subject's kind (layers or cores), else
    of all of them."""
    layer = any(is_layer(part, subject.conf_dir) for part in subject.parts)
    kind = durations[durations["attention"].map(lambda a: _is_published_layer(a)) == layer]
    return float((kind if len(kind) else durations)["duration_s"].mean())


def _is_published_layer(attention: str) -> bool:
    parts = [part.partition("*")[0] for part in attention.split("+")]
    try:
        return any(is_layer(part) for part in parts)
    except ValueError:  # a published attention no longer in conf/attention/
        return False


def state_size_estimate(subject: Subject, grid: dict[str, Any], root: Path,
                        published_runs: pd.DataFrame) -> tuple[int, int, float]:
    """(runs left known, runs left at most, CPU-seconds per run on average) of the subject's
    state-size columns: each column trains len(lrs) x len(lr_seeds) + the other seeds + (at
    most) more_seeds, less the runs finished under `root`."""
    known = most = 0
    seconds = []
    lr_runs = len(grid["lrs"]) * len(grid["lr_seeds"] or grid["seeds"])
    other = len([s for s in grid["seeds"] if s not in (grid["lr_seeds"] or [])])
    for width, conv in state_size_columns(subject, grid):
        done = len(list(root.glob(f"d{width}_conv{conv}_*/{subject.name}/{SUMMARY_FILE}")))
        known += max(lr_runs + other - done, 0)
        most += max(lr_runs + other + len(grid["more_seeds"]) - done, 0)
        column = published_runs[(published_runs["d_model"] == width)
                                & (published_runs["short_conv"] == conv)]
        seconds.append(_kind_mean(column if len(column) else published_runs, subject))
    return known, most, (sum(seconds) / len(seconds) if seconds else 0.0)


def listops_estimate(subject: Subject, seeds: tuple[int, ...], root: Path,
                     published: pd.DataFrame) -> tuple[int, float]:
    """(runs left, CPU-seconds per run: published duration_s x its 2 threads)."""
    left = sum(not (root / f"seed{seed}" / subject.name / SUMMARY_FILE).is_file()
               for seed in seeds)
    return left, LISTOPS_THREADS * _kind_mean(published, subject)


def mixture_estimate(subject: Subject, grid: dict[str, Any], root: Path,
                     published_runs: pd.DataFrame) -> tuple[int, int, float]:
    """(runs left known, runs left at most, CPU-seconds per run: the published mixture runs'
    duration_s at their one thread) of the subject's mixture: each kind of positions at the
    grid's seeds, and at most its more seeds too."""
    def left(seeds: list[int]) -> int:
        return sum(not (root / f"{positions}_seed{seed}" / subject.name / SUMMARY_FILE).is_file()
                   for positions in grid["positions"] for seed in seeds)

    known = left(grid["seeds"])
    return (known, known + left(grid["more_seeds"]),
            _kind_mean(published_runs.drop_duplicates("run"), subject))


def hours_line(section: str, known: int, most: int, seconds: float) -> str:
    """'state_size: 11 to 16 runs, about 0.3 to 0.4 CPU-hours (93 s a run, published)'."""
    if most == 0:
        return f"{section}: finished"
    runs = f"{known} runs" if known == most else f"{known} to {most} runs"
    low, high = known * seconds / 3600, most * seconds / 3600
    hours = f"{high:.2f}" if known == most else f"{low:.2f} to {high:.2f}"
    return (f"{section}: {runs}, about {hours} CPU-hours ({seconds:.0f} CPU-s a run, the mean of "
            "the published runs of its kind)")
