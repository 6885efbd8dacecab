"""The protocol and runs of the self-pretraining studies (SPT; Amos, Berant & Gupta, "Never
Train from Scratch", ICLR 2024), declared in spt_study: does pretraining each model on the task's
own inputs change how the attentions compare?

Each attention of the preset's `study:` block is trained at each seed in three arms, a folder
per run, <root>/<arm>/seed<s>/<attention>/:
- scratch: from scratch at the preset's fine-tuning steps F (trainer.max_steps). Where the
  block names a published runs CSV (`published`: the small-budget ListOps sweep,
  docs/results/results_runs.csv), its rows of the same task and F are these runs, read from
  the file and never retrained; an attention or seed without a row there is trained.
- spt: the preset as it is, P steps of masked-token pretraining (pretrain.max_steps), then F of
  fine-tuning: compared with scratch at equal fine-tuning steps.
- scratch_total: from scratch at P + F steps: compared with spt at equal total steps.
A scratch arm runs the preset with pretrain=none and its pretraining keys deleted (~pretrain.*),
so it is the same model, data and optimizer. Where the block sets a success `threshold` and
`more_seeds`, an attention whose seeds split at it in any arm gets the more seeds in every arm.

A run with a summary.json is finished; so is a run the study's runs CSV lists as trained by it
(load_archive, --resume-from), each row checked against the preset's protocol (task, steps per
arm), so the study spans sessions and machines. plan_table times what is left from the
durations of comparable runs (the same attention's finished runs, scaled by steps).
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
from linarena.attention.variants import check_variant_names, variant_names
from linarena.metrics import PRETRAIN_TEST_ACC, TEST_ACC
from linarena.studies.preset import compose_preset
from linarena.studies.runs import train_command
from linarena.studies.study import SettingsPoint, Task, pending, train_commands
from linarena.training.summary import SUMMARY_FILE, read_summary

ARMS = ("scratch", "spt", "scratch_total")
SCRATCH, SPT, SCRATCH_TOTAL = ARMS
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


@dataclasses.dataclass(frozen=True)
class Protocol:
    """What every run of the study shares, from the preset (with the command line's overrides)
    and its `study:` block: the task, P pretraining and F fine-tuning steps, the masking
    fraction, the seeds, the attentions, the success threshold (None: accuracies are compared
    as means only), chance, the published runs CSV of the scratch arm, and the overrides that
    make a run of the preset start from scratch."""

    preset: str
    task: str
    pretrain_steps: int
    finetune_steps: int
    mask_fraction: float
    seeds: tuple[int, ...]
    more_seeds: tuple[int, ...]
    attentions: tuple[str, ...]
    threshold: float | None
    chance: float | None
    published: Path | None
    scratch_overrides: tuple[str, ...]
    model: str

    def steps(self, arm: str) -> tuple[int, int]:
        """(pretraining steps, classifier steps) of a run in `arm`."""
        p, f = self.pretrain_steps, self.finetune_steps
        return {SCRATCH: (0, f), SPT: (p, f), SCRATCH_TOTAL: (0, p + f)}[arm]

    def total_steps(self, arm: str) -> int:
        return sum(self.steps(arm))

    def arm_words(self, arm: str) -> str:
        """'SPT, 300 + 300 steps' for the tables and the figure."""
        p, f = self.steps(arm)
        return f"SPT, {p} + {f} steps" if arm == SPT else f"from scratch, {f} steps"


def override_key(override: str) -> str:
    """The key a train.py override sets ("pretrain.max_steps" of "+pretrain.max_steps=3")."""
    return override.lstrip("~+").partition("=")[0]


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(study.* overrides, which change the grid; the others, for train.py)."""
    grid = [o for o in overrides if override_key(o).startswith("study.")]
    return grid, [o for o in overrides if o not in grid]


def load_protocol(preset: str, overrides: Sequence[str] = ()) -> Protocol:
    """The Protocol of experiment=<preset> with `overrides` (study.* ones change the block)."""
    grid, train = split_overrides(overrides)
    cfg = compose_preset(preset, [*train, *grid], hydra_config=True)
    if "study" not in cfg:
        raise ValueError(f"experiment={preset} has no `study:` block (seeds, attentions, "
                         "threshold, published); use spt/listops_small or spt/pathfinder_small")
    if cfg.pretrain.objective != "mlm" or cfg.pretrain.get("stage") != "both":
        raise ValueError(f"experiment={preset}: the SPT arm needs pretrain=mlm with "
                         f"pretrain.stage=both, not {cfg.pretrain.objective}, "
                         f"{cfg.pretrain.get('stage')}")
    task = str(cfg.hydra.runtime.choices.data)
    fraction = cfg.pretrain.get("mask_fraction")
    if fraction is None:
        fraction = (cfg.pretrain.get("mask_fractions") or {}).get(task)
    block = cfg.study
    names = list(block.get("attentions") or variant_names())
    more = tuple(block.get("more_seeds") or ())
    seeds = tuple(block.get("seeds") or ())
    if not seeds or set(more) & set(seeds):
        raise ValueError(f"experiment={preset}: study.seeds {list(seeds)} must list seeds, and "
                         f"study.more_seeds {list(more)} only new ones")
    published = block.get("published")
    if published is not None:
        published = Path(str(published))
        published = published if published.is_absolute() else PUBLISHED_DIR.parents[1] / published
    # The scratch arms: the same run without pretraining; the preset's pretrain keys would be
    # unknown to pretrain=none (train.py refuses them), so they are deleted.
    plain = compose_preset(preset, [*(o for o in train if not _pretraining(o)), "pretrain=none"])
    deleted = [f"~pretrain.{key}" for key in plain.pretrain if key != "objective"]
    model = cfg.model
    return Protocol(
        preset=preset, task=task, pretrain_steps=int(cfg.pretrain.max_steps),
        finetune_steps=int(cfg.trainer.max_steps),
        mask_fraction=float("nan") if fraction is None else float(fraction),
        seeds=seeds, more_seeds=more, attentions=tuple(check_variant_names(names)),
        threshold=None if block.get("threshold") is None else float(block.threshold),
        chance=None if block.get("chance") is None else float(block.chance),
        published=published, scratch_overrides=("pretrain=none", *deleted),
        model=(f"d_model {model.d_model}, {model.num_layers} layer"
               f"{'s' * (model.num_layers != 1)}, {model.num_heads} heads, "
               f"batch {cfg.data.batch_size}"))


def _pretraining(override: str) -> bool:
    key = override_key(override)
    return key == "pretrain" or key.startswith("pretrain.")


def arm_overrides(arm: str, protocol: Protocol, overrides: Sequence[str]) -> tuple[str, ...]:
    """The train.py overrides of a run in `arm`: the command line's (not study.*), and for a
    scratch arm the scratch overrides instead of any pretraining one, at P + F steps for
    scratch_total."""
    train = split_overrides(overrides)[1]
    if arm == SPT:
        return tuple(train)
    kept = [o for o in train if not _pretraining(o)
            and not (arm == SCRATCH_TOTAL and override_key(o) == "trainer.max_steps")]
    steps = [f"trainer.max_steps={protocol.total_steps(arm)}"] if arm == SCRATCH_TOTAL else []
    return (*protocol.scratch_overrides, *kept, *steps)


@dataclasses.dataclass(frozen=True)
class ArmPoint(SettingsPoint):
    """One arm at one seed: its attentions, each in its own train.py process, in
    <root>/<arm>/seed<s>/<attention>/, one sweep per arm for compare.py (<root>/<arm>)."""

    arm: str
    seed: int
    overrides: tuple[str, ...] = ()

    @property
    def folder_name(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    @property
    def settings(self) -> list[str]:
        return [*self.overrides, f"seed={self.seed}"]

    def commands(self, preset: str | None, names: Sequence[str], root: Path,
                 entries: Mapping[str, Sequence[str]] | None = None) -> list[list[str]]:
        return train_commands(preset, self.settings, names, root / self.folder_name, entries,
                              sweep_dir=root / self.arm, process_per_run=True)


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


