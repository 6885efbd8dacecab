"""The finished runs of a self-pretraining study (spt): a run with a summary.json in its folder
<root>/<arm>/seed<s>/<attention>/ is finished; so is a run the study's runs CSV lists as trained
by it (load_archive, --resume-from), each row checked against the preset's protocol (task, steps
per arm), so the study spans sessions and machines; and the scratch arm's rows of the published
runs CSV the `study:` block names (published_scratch) are its runs, never retrained. seed_tasks
says what is left to train, seed by seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from linarena.analysis.provenance import PUBLISHED_DIR
from linarena.analysis.result_files import read_csv_checked
from linarena.analysis.runs import read_run
from linarena.metrics import PRETRAIN_TEST_ACC, TEST_ACC
from linarena.studies.runs import train_command
from linarena.studies.spt import ARMS, SCRATCH, ArmPoint, Protocol, arm_overrides
from linarena.studies.study import Task
from linarena.training.summary import SUMMARY_FILE, read_summary

# One row per run of the runs CSV (<name>_runs.csv), published scratch rows included.
RUN_COLUMNS = ("task", "arm", "attention", "seed", "origin", "pretrain_steps", "finetune_steps",
               "total_steps", "mask_fraction", "test_acc", "val_acc_best", "pretrain_test_acc",
               "failed", "duration_s", "pretrain_duration_s", "cpu_s", "threads", "commit",
               "cpu", "cpu_kernels", "run", "source", "command")
NUMERIC_COLUMNS = ("seed", "pretrain_steps", "finetune_steps", "total_steps", "mask_fraction",
                   "test_acc", "val_acc_best", "pretrain_test_acc", "duration_s",
                   "pretrain_duration_s", "cpu_s", "threads")
# origin: trained by this study, or read from the published runs CSV.
STUDY, PUBLISHED = "study", "published"


def run_id(arm: str, seed: int, attention: str) -> str:
    return f"{arm}/seed{seed}/{attention}"


def check_row(row: Mapping, protocol: Protocol, where: str) -> None:
    """A ValueError unless the run `row` (RUN_COLUMNS) was trained under `protocol`."""
    arm = row["arm"]
    if arm not in ARMS:
        raise ValueError(f"{where}: run {row['run']} has arm {arm!r}, not one of {ARMS}")
    found = (row["task"], int(row["pretrain_steps"]), int(row["finetune_steps"]))
    wanted = (protocol.task, *protocol.steps(arm))
    if found != wanted:
        raise ValueError(
            f"{where}: run {row['run']} has task {found[0]}, {found[1]} pretraining and "
            f"{found[2]} fine-tuning steps, but this study's {arm} arm trains task {wanted[0]}, "
            f"{wanted[1]} and {wanted[2]} (experiment={protocol.preset}): it belongs to another "
            "study; use another --root, or resume from this study's runs CSV or none")


def _relative(path: Path) -> str:
    path = path.resolve()
    repo = PUBLISHED_DIR.parents[1]
    return str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)


def run_row(folder: Path) -> dict:
    """The row of one finished run folder, <root>/<arm>/seed<s>/<attention>/ (RUN_COLUMNS), from
    its summary.json as linarena.analysis.runs reads it, and its stages (training.summary)."""
    record = read_run(folder / SUMMARY_FILE, required=False)
    summary = read_summary(folder) or {}
    pretrain = dict((record.config or {}).get("pretrain") or {})
    stage = (summary.get("stages") or {}).get("pretrain") or {}
    mlm = pretrain.get("objective") == "mlm"
    record_pretrain = summary.get("pretrain") or {}
    accuracy = record.metrics.get(TEST_ACC.key)
    return {
        "task": record.task, "arm": folder.parent.parent.name, "attention": folder.name,
        "seed": record.seed, "origin": STUDY,
        "pretrain_steps": int(pretrain.get("max_steps", 0)) if mlm else 0,
        "finetune_steps": record.max_steps, "total_steps": record.steps,
        "mask_fraction": record_pretrain.get("mask_fraction", float("nan")),
        "test_acc": float("nan") if accuracy is None else accuracy,
        "val_acc_best": record.val_acc_best,
        "pretrain_test_acc": (stage.get("metrics") or {}).get(PRETRAIN_TEST_ACC.key),
        "failed": record.failed, "duration_s": record.duration_s,
        "pretrain_duration_s": stage.get("duration_s"), "cpu_s": record.cpu_s,
        "threads": (summary.get("machine") or {}).get("threads"), "commit": record.commit,
        "cpu": record.cpu, "cpu_kernels": record.cpu_kernels,
        "run": run_id(folder.parent.parent.name, record.seed, folder.name),
        "source": _relative(folder / SUMMARY_FILE),
        "command": train_command(folder, record.env),
    }


def study_folder_runs(root: Path, protocol: Protocol) -> pd.DataFrame:
    """The finished runs under `root` (a summary.json at <arm>/seed<s>/<attention>/; a run's
    stages are deeper and not counted), each checked against `protocol`."""
    folders = sorted(path.parent for arm in ARMS for path in
                     (root / arm).glob(f"seed*/*/{SUMMARY_FILE}"))
    rows = [run_row(folder) for folder in folders]
    for row in rows:
        check_row(row, protocol, str(root))
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def load_archive(path: Path, protocol: Protocol) -> pd.DataFrame:
    """The runs this study trained, from a runs CSV it wrote (<name>_runs.csv): they count as
    finished. Its published rows are left out (the study reads them from the published file);
    each row is checked against `protocol`."""
    table = read_csv_checked(path, required_columns=RUN_COLUMNS, numeric_columns=NUMERIC_COLUMNS,
                             filled_columns=("task", "arm", "attention", "seed", "origin",
                                             "pretrain_steps", "finetune_steps", "run"))
    table = table[table["origin"] == STUDY].reset_index(drop=True)
    for row in table.to_dict("records"):
        check_row(row, protocol, str(path))
    table["failed"] = table["failed"].astype(str).str.lower() == "true"
    return table[list(RUN_COLUMNS)]


def published_scratch(protocol: Protocol, names: Iterable[str]) -> pd.DataFrame:
    """The scratch arm's published rows (RUN_COLUMNS): the runs of the published CSV with the
    study's task and F steps, of `names` at the study's seeds. Rows of two sweeps there are
    refused (which one would be the scratch arm?)."""
    if protocol.published is None:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    table = read_csv_checked(
        protocol.published, required_columns=("sweep", "task", "attention", "seed", "max_steps",
                                               "failed", "test_acc_pct", "source"),
        numeric_columns=("seed", "max_steps", "test_acc_pct", "duration_s", "cpu_s"))
    seeds = {*protocol.seeds, *protocol.more_seeds}
    table = table[(table["task"] == protocol.task)
                  & (table["max_steps"] == protocol.finetune_steps)
                  & table["attention"].isin(list(names)) & table["seed"].isin(seeds)]
    sweeps = sorted(set(table["sweep"]))
    if len(sweeps) > 1:
        raise ValueError(f"{protocol.published}: runs of {len(sweeps)} sweeps have task "
                         f"{protocol.task} and {protocol.finetune_steps} steps ({sweeps}): "
                         "which is the scratch arm is not clear")
    where = _relative(protocol.published)

    def column(name: str) -> pd.Series:
        return table[name] if name in table.columns else pd.Series(np.nan, index=table.index)

    rows = pd.DataFrame({
        "task": table["task"], "arm": SCRATCH, "attention": table["attention"],
        "seed": table["seed"].astype(int), "origin": PUBLISHED, "pretrain_steps": 0,
        "finetune_steps": table["max_steps"].astype(int),
        "total_steps": table["max_steps"].astype(int), "mask_fraction": np.nan,
        "test_acc": table["test_acc_pct"] / TEST_ACC.scale, "val_acc_best": np.nan,
        "pretrain_test_acc": np.nan,
        "failed": table["failed"].astype(str).str.lower() == "true",
        "duration_s": column("duration_s"), "pretrain_duration_s": np.nan,
        "cpu_s": column("cpu_s"), "threads": np.nan, "commit": column("commit"),
        "cpu": column("cpu"), "cpu_kernels": column("cpu_kernels"),
        "run": [run_id(SCRATCH, int(s), a) for s, a in zip(table["seed"], table["attention"],
                                                            strict=True)],
        "source": [f"{where}: {s}" for s in table["source"]],
        "command": [f"sweep {s}" for s in table["sweep"]],
    })
    return rows[list(RUN_COLUMNS)].reset_index(drop=True)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The protocol, the attentions studied, the published scratch rows and the archived runs
    (--resume-from)."""

    protocol: Protocol
    names: list[str]
    published: pd.DataFrame
    archived: pd.DataFrame | None

    @property
    def archived_ids(self) -> frozenset[str]:
        return frozenset() if self.archived is None else frozenset(self.archived["run"])


def combined_runs(root: Path, loaded: Loaded) -> pd.DataFrame:
    """Every finished run of the study: its folders', the archived ones no folder reruns, and
    the published scratch rows, of the attentions and seeds studied."""
    folders = study_folder_runs(root, loaded.protocol) if root.is_dir() else \
        pd.DataFrame(columns=list(RUN_COLUMNS))
    parts = [folders]
    if loaded.archived is not None:
        parts.append(loaded.archived[~loaded.archived["run"].isin(folders["run"])])
    parts.append(loaded.published[~loaded.published["run"].isin(folders["run"])])
    parts = [part for part in parts if len(part)]
    runs = pd.concat(parts, ignore_index=True) if parts else \
        pd.DataFrame(columns=list(RUN_COLUMNS))
    seeds = {*loaded.protocol.seeds, *loaded.protocol.more_seeds}
    runs = runs[runs["attention"].isin(loaded.names) & runs["seed"].isin(seeds)]
    order = {name: rank for rank, name in enumerate(loaded.names)}
    return runs.assign(
        _arm=runs["arm"].map(ARMS.index), _name=runs["attention"].map(order)).sort_values(
        ["_arm", "_name", "seed"]).drop(columns=["_arm", "_name"]).reset_index(drop=True)


def published_keys(loaded: Loaded) -> frozenset[tuple[str, int]]:
    return frozenset(zip(loaded.published["attention"], loaded.published["seed"].astype(int),
                         strict=True))


def seed_tasks(loaded: Loaded, seeds: Iterable[int], names: Sequence[str],
               overrides: Sequence[str]) -> list[Task]:
    """Every arm of `names` at each of `seeds`, seed by seed (a partial study has every arm of
    its first seeds), the published scratch runs left out."""
    published = published_keys(loaded)
    tasks: list[Task] = []
    for seed in seeds:
        for arm in ARMS:
            todo = [name for name in names if not (arm == SCRATCH and (name, seed) in published)]
            if todo:
                tasks.append((ArmPoint(arm, seed, arm_overrides(arm, loaded.protocol,
                                                                overrides)), todo))
    return tasks


def split_attentions(runs: pd.DataFrame, protocol: Protocol, names: Sequence[str]) -> list[str]:
    """The attentions of `names` whose finished runs at the study's seeds split at the
    threshold in some arm (some at or above it, some below; a failed run is below); none
    without a threshold."""
    if protocol.threshold is None:
        return []
    base = runs[runs["seed"].isin(protocol.seeds)]
    split = []
    for name in names:
        for _, arm in base[base["attention"] == name].groupby("arm"):
            hits = int((arm["test_acc"].fillna(-1.0) >= protocol.threshold).sum())
            if 0 < hits < len(arm):
                split.append(name)
                break
    return split
