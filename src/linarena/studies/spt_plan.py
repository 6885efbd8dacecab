"""How long the rest of a self-pretraining study takes (scripts/study.py spt_* --plan): the
runs left per arm and attention, each timed from the durations of comparable finished runs (the
same attention's in the same arm, else scaled by steps from its other arms' or the published
runs', the published ones calibrated against this study's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from linarena.studies.spt import ARMS, Protocol
from linarena.studies.spt_runs import (
    PUBLISHED,
    STUDY,
    Loaded,
    combined_runs,
    seed_tasks,
    split_attentions,
)
from linarena.studies.study import pending


def published_calibration(runs: pd.DataFrame) -> float:
    """How much slower this study's runs are than the published runs of the same attention, per
    step (the median ratio over the study's timed runs; 1 without any to compare): published
    runs may have run on more threads, or on an idle machine."""
    timed = runs[runs["duration_s"].notna() & (runs["total_steps"] > 0)]
    per_step = timed["duration_s"] / timed["total_steps"].astype(float)
    published = per_step[timed["origin"] == PUBLISHED].groupby(
        timed.loc[timed["origin"] == PUBLISHED, "attention"]).mean()
    ours = timed["origin"] == STUDY
    ratios = (per_step[ours] / timed.loc[ours, "attention"].map(published)).dropna()
    return float(ratios.median()) if len(ratios) else 1.0


def seconds_per_run(runs: pd.DataFrame, protocol: Protocol, arm: str, name: str,
                    calibration: float = 1.0) -> float:
    """The expected duration of a run of `name` in `arm`: the mean of its finished runs there,
    else the mean seconds per step of its runs in the other arms (this study's first, then the
    published ones times `calibration`, published_calibration) times the arm's steps, else the
    same over every attention's runs in the arm, then over all; NaN with none."""
    timed = runs[runs["duration_s"].notna() & (runs["total_steps"] > 0)]
    same = timed[(timed["arm"] == arm) & (timed["attention"] == name)]
    if len(same):
        return float(same["duration_s"].mean())
    timed = timed.assign(per_step=timed["duration_s"] / timed["total_steps"].astype(float)
                         * np.where(timed["origin"] == PUBLISHED, calibration, 1.0))
    ours = timed[timed["origin"] == STUDY]
    for pool in (ours[ours["attention"] == name], timed[timed["attention"] == name],
                 ours[ours["arm"] == arm], timed[timed["arm"] == arm], ours, timed):
        if len(pool):
            return float(pool["per_step"].mean() * protocol.total_steps(arm))
    return float("nan")


def plan_table(root: Path, loaded: Loaded, overrides: Sequence[str]) -> pd.DataFrame:
    """The runs left per arm and attention (`runs`, `exact`: False for more seeds that depend
    on runs not finished yet, counted as at most) with the seconds each is expected to take."""
    protocol = loaded.protocol
    runs = combined_runs(root, loaded)
    left = pending(seed_tasks(loaded, protocol.seeds, loaded.names, overrides), root,
                   loaded.archived_ids)
    rows = [(point.arm, name, True) for point, names in left for name in names]
    if protocol.more_seeds and protocol.threshold is not None:
        base = runs[runs["seed"].isin(protocol.seeds)]
        finished = {name: base[base["attention"] == name].groupby("arm").size()
                    for name in loaded.names}
        split = set(split_attentions(runs, protocol, loaded.names))
        for name in loaded.names:
            decided = all(finished[name].get(arm, 0) == len(protocol.seeds) for arm in ARMS)
            if decided and name not in split:
                continue
            more = pending(seed_tasks(loaded, protocol.more_seeds, [name], overrides), root,
                           loaded.archived_ids)
            rows += [(point.arm, name, decided) for point, names in more for _ in names]
    table = pd.DataFrame(rows, columns=["arm", "attention", "exact"])
    calibration = published_calibration(runs)
    table["seconds"] = [seconds_per_run(runs, protocol, arm, name, calibration)
                        for arm, name in zip(table["arm"], table["attention"], strict=True)]
    return table
