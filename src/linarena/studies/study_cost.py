"""What a study run costs, before and after a change: the state-size study's own train.py
commands, run by two checkouts of the code one right after the other.

A case is one study run: an entry of the preset (a variant of conf/attention/ or a study entry)
at one width, with the short convolution the study trains it with (3, or 0 for a layer with
its own), at the lr the published study chose for it (docs/results/mqar_state_size.csv), at
one seed: a run as long as the study's own, early stop included. Each case runs in each
checkout in its own process (OMP and MKL threads 1, as the study runner sets them), the
checkouts alternating which goes first from case to case, so that a slow minute of a shared
machine falls on both. Per run: cpu_s and duration_s of its summary.json (training, validation
and test), the CPU time of its whole process (start-up included), its steps and test accuracy;
the same steps and accuracy before and after say the change left the numbers as they were.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from linarena.analysis.runs import parse_summary_file
from linarena.studies.preset import load_grid
from linarena.studies.state_size import trains_at
from linarena.studies.study import train_commands

COLUMNS = ("entry", "d_model", "short_conv", "lr", "seed", "code", "commit", "steps",
           "test_acc", "cpu_s", "process_cpu_s", "duration_s")


@dataclass(frozen=True)
class CostCase:
    """One study run: `entry` at d_model `d_model` and `short_conv`, lr `lr`, seed `seed`."""

    entry: str
    d_model: int
    short_conv: int
    lr: float
    seed: int

    @property
    def settings(self) -> list[str]:
        return [f"model.d_model={self.d_model}", f"model.short_conv={self.short_conv}",
                f"optim.lr={self.lr}", f"seed={self.seed}"]


def cost_cases(preset: str, names: Sequence[str], widths: Sequence[int],
               chosen: pd.DataFrame, seed: int = 1) -> list[CostCase]:
    """A case per name and width, at the largest short conv the study trains the name with and
    the lr `chosen` (a study summary: attention, short_conv, d_model, chosen_lr) holds for it.
    ValueError for a name or width the summary has no chosen lr for."""
    grid = load_grid(preset)
    cases = []
    for name in names:
        for width in widths:
            conv = max(c for c in grid["short_conv"] if trains_at(name, int(c)))
            row = chosen[(chosen["attention"] == name) & (chosen["short_conv"] == conv)
                         & (chosen["d_model"] == width)]
            if row.empty or pd.isna(row["chosen_lr"].iloc[0]):
                raise ValueError(f"the study summary has no chosen lr for {name} at d_model "
                                 f"{width}, short conv {conv}: give names and widths it holds")
            cases.append(CostCase(name, int(width), int(conv), float(row["chosen_lr"].iloc[0]),
                                  seed))
    return cases


def run_case(case: CostCase, code: Path, preset: str, entries: dict[str, list[str]],
             extra: Sequence[str] = ()) -> dict[str, Any]:
    """Train `case` with the checkout at `code` (its src/ and train.py), in a process of its own
    with one thread; the row of COLUMNS (code and commit are the caller's)."""
    with tempfile.TemporaryDirectory(prefix="study_cost_") as folder:
        [command] = train_commands(preset, case.settings, [case.entry], Path(folder), entries,
                                   process_per_run=True)
        command = [command[0], str(code / "train.py"), *command[2:], *extra]
        env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                            "PYTHONPATH": str(code / "src")}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, cwd=code, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        summary = parse_summary_file(Path(folder) / case.entry / "summary.json")
    return {"entry": case.entry, "d_model": case.d_model, "short_conv": case.short_conv,
            "lr": case.lr, "seed": case.seed, "steps": summary["global_step"],
            "test_acc": summary["metrics"].get("test/acc"), "cpu_s": summary["cpu_s"],
            "process_cpu_s": round(after.ru_utime + after.ru_stime
                                   - before.ru_utime - before.ru_stime, 1),
            "duration_s": summary["duration_s"]}


def ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per case, after / before of cpu_s and process_cpu_s, and whether steps and test accuracy
    are the same; `rows` holds one run per case and code ("before", "after")."""
    keys = ["entry", "d_model", "short_conv", "lr", "seed"]
    wide = rows.pivot_table(index=keys, columns="code",
                            values=["cpu_s", "process_cpu_s", "steps", "test_acc"],
                            aggfunc="first")
    out = pd.DataFrame(index=wide.index)
    for value in ("cpu_s", "process_cpu_s"):
        out[f"{value}_before"] = wide[(value, "before")]
        out[f"{value}_after"] = wide[(value, "after")]
        out[f"{value}_ratio"] = (out[f"{value}_after"] / out[f"{value}_before"]).round(3)
    out["same_result"] = ((wide[("steps", "before")] == wide[("steps", "after")])
                          & (wide[("test_acc", "before")] == wide[("test_acc", "after")]))
    return out.reset_index()


def median_summary(table: pd.DataFrame) -> dict[str, float]:
    """The medians over the cases of cpu_s before and after and of their ratio."""
    return {"cases": len(table),
            "median_cpu_s_before": statistics.median(table["cpu_s_before"]),
            "median_cpu_s_after": statistics.median(table["cpu_s_after"]),
            "median_cpu_s_ratio": statistics.median(table["cpu_s_ratio"]),
            "median_process_cpu_s_ratio": statistics.median(table["process_cpu_s_ratio"])}
