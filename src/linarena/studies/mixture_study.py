"""The MQAR mixture as a study (issue #28 item 4a, #26): every attention of conf/attention/ with
each kind of positions of the preset's `study:` block (e.g. none and rope: where does length
generalisation appear without absolute position codes?), over its seeds, trained by the study
runner (study.run_tasks: resumable, a folder per run, <root>/<positions>_seed<s>/<attention>/),
reported by studies.mixture.

Seeds: the grid's `seeds` first; an (attention, positions) whose seeds split at some test
setting (some reach SUCCESS_THRESHOLD and some do not) gets the grid's `more_seeds` too. A layer
with its own short convolutions runs with model.short_conv=0 (the preset's conv would be a
second one, which the model refuses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linarena.attention.variants import check_variant_names, owns_short_conv, variant_names
from linarena.studies.mixture import load_runs, split_rows
from linarena.studies.preset import compose_preset
from linarena.studies.study import SettingsPoint, Task, group_tasks, pending, run_tasks
from linarena.training.summary import SUMMARY_FILE


@dataclasses.dataclass(frozen=True)
class MixturePoint(SettingsPoint):
    """One (positions, seed) of the mixture: the attentions there are trained together."""

    positions: str
    seed: int

    @property
    def folder_name(self) -> str:
        return f"{self.positions}_seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [f"model.positions={self.positions}", f"seed={self.seed}"]


def load_mixture_grid(preset: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The `study:` block of a mixture preset: positions and seeds (lists), more_seeds."""
    cfg = compose_preset(preset, overrides)
    study = cfg.get("study")
    if study is None or not study.get("positions") or not study.get("seeds"):
        raise ValueError(f"experiment={preset} has no `study:` block with positions and seeds; "
                         "use a mixture preset such as mqar_mixture_cpu")
    grid = {"positions": [str(p) for p in study.positions], "seeds": list(study.seeds),
            "more_seeds": list(study.get("more_seeds") or [])}
    if set(grid["more_seeds"]) & set(grid["seeds"]):
        raise ValueError(f"experiment={preset}: study.more_seeds={grid['more_seeds']} repeats "
                         f"seeds of study.seeds {grid['seeds']}; list new seeds only")
    return grid


def own_conv_entries(names: Sequence[str]) -> dict[str, list[str]]:
    """The layers that own their short convolutions, each run with model.short_conv=0."""
    return {name: ["model.short_conv=0"] for name in names if owns_short_conv(name)}


def run_mixture(preset: str, root: Path, attentions: Sequence[str] | None = None,
                jobs: int = 2, threads: int = 1, extra: Sequence[str] = ()) -> dict[str, int]:
    """Train every missing run of the mixture study, `jobs` points at a time: the grid's seeds,
    then more_seeds where they split; a count per outcome."""
    grid = load_mixture_grid(preset, [o for o in extra if o.startswith("study.")])
    extra = [o for o in extra if not o.startswith("study.")]
    names = check_variant_names(attentions) if attentions else variant_names()
    entries = own_conv_entries(names)
    counts: dict[str, int] = {}
    tasks: list[Task] = [(MixturePoint(positions, seed), list(names))
                         for seed in grid["seeds"] for positions in grid["positions"]]
    todo = pending(tasks, root, frozenset())
    print(f"{preset}: {len(names)} attentions x positions {grid['positions']} x seeds "
          f"{grid['seeds']}: {sum(len(n) for _, n in todo)} runs to go", flush=True)
    run_tasks(todo, preset, root, jobs, threads, extra, counts, entries=entries)
    if grid["more_seeds"] and any(root.rglob(SUMMARY_FILE)):
        split = split_rows(load_runs([root])[0], grid["seeds"])
        more = pending(group_tasks((MixturePoint(positions, seed), attention)
                                   for seed in grid["more_seeds"]
                                   for attention, positions in sorted(split)
                                   if attention in names), root, frozenset())
        print(f"{preset}: {len(split)} (attention, positions) split; "
              f"{sum(len(n) for _, n in more)} runs of more seeds to go", flush=True)
        run_tasks(more, preset, root, jobs, threads, extra, counts, entries=entries)
    return counts
