"""Load finished training runs from local summary.json files (and, in wandb_runs, from the W&B
API into the same records).

This module is the one reader of summary.json: the comparison (compare.py), the seed sweeps and
the studies (linarena.studies.runs, linarena.studies.mixture) get a run's fields from its
RunRecord (read_run), never from a JSON parse of their own.

Every run becomes one :class:`RunRecord`. Local runs: each training run writes ``summary.json``
in its Hydra output folder (schema in the README; every schema version is read). W&B runs:
``task``, ``attention``, ``seed``, ``sweep`` and ``debug`` in the run config (group = task and
name ``{attention}-s{seed}`` also work), metrics in the run summary under the same names as in
summary.json. The metrics read are those of :mod:`linarena.metrics` that the comparison shows. A
run whose test accuracy is missing or NaN (it diverged) is kept and marked failed. Debug runs
(debug=smoke/fdr/overfit) are left out unless asked for.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from linarena.metrics import (
    SCHEMA_VERSION,
    TEST_ACC,
    TEST_ACC_PER_SETTING,
    VAL_ACC_BEST,
    compared_metrics,
)

# A per-setting test accuracy of summary.json's metrics (a mixture run's): test/acc_L<n>_P<k>.
SETTING = re.compile(re.escape(TEST_ACC_PER_SETTING.key) + r"L(?P<length>\d+)_P(?P<pairs>\d+)$")


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One training run as the comparison and the studies use it: its names and the compared
    metrics (linarena.metrics.compared_metrics, by key, as stored: accuracy as a fraction; None
    where an optional metric is absent or the run failed)."""

    task: str
    attention: str
    seed: int
    metrics: Mapping[str, float | None]
    source: str  # where it came from: a summary.json path or a W&B run path
    # The comparison it belongs to: its multirun folder or "runs", then the overrides other
    # than attention and seed (linarena.training.summary.sweep_label).
    sweep: str = "runs"
    debug: bool = False
    # trainer.max_steps, the run's step budget (None where the summary does not say), and how
    # long the run took (summary.json duration_s; None where unknown).
    max_steps: int | None = None
    duration_s: float | None = None
    # The CPU seconds its process used over those duration_s, all threads (summary.json cpu_s;
    # None where unknown): below its other seeds' share, other processes took its cores.
    cpu_s: float | None = None
    # model.positions (None where the run does not say).
    positions: str | None = None
    # The code and machine that trained it (summary.json's commit and machine; None where the
    # run does not say): what a per-seed row must name, since the last bits of a
    # CPU's sums can move a seed across a threshold.
    commit: str | None = None
    cpu: str | None = None
    cpu_kernels: str | None = None
    # What the studies read besides (summary.json only; a runs CSV of compare.py does not keep
    # them, so they are left out of a record's equality): the best validation accuracy
    # (val/acc_best), the run's last optimizer step (global_step), the environment its numbers
    # depend on (machine.env, e.g. OMP_NUM_THREADS=1), its resolved config ("config", schema
    # version 2 on) and its test accuracy per (length, pairs) setting (a mixture run's
    # test/acc_L<length>_P<pairs>, NaN where it diverged); None or empty where it does not say.
    val_acc_best: float | None = dataclasses.field(default=None, compare=False)
    steps: int | None = dataclasses.field(default=None, compare=False)
    env: Mapping[str, str] | None = dataclasses.field(default=None, compare=False)
    config: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)
    setting_accuracies: Mapping[tuple[int, int], float] = dataclasses.field(
        default_factory=dict, compare=False)

    @property
    def failed(self) -> bool:
        """No finite test accuracy: the run diverged (NaN, which summary.json writes as null)."""
        return self.metrics.get(TEST_ACC.key) is None


def parse_filters(items: Iterable[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> ``{key: value}``, values parsed as JSON when they are
    (1, 0.5, true)."""
    filters: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"malformed filter {item!r}: expected key=value, e.g. task=listops")
        try:
            filters[key] = json.loads(raw)
        except json.JSONDecodeError:
            filters[key] = raw
    return filters


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def summary_matches(summary: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    """True if every filter key (dotted for nesting: ``hparams.d_model``) has the filter's value."""
    flat = _flatten(summary)
    return all(key in flat and flat[key] == value for key, value in filters.items())


def _number(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def read_metrics(metrics: Mapping[str, Any], where: str, version: int,
                 required: bool = True) -> dict[str, float | None]:
    """The compared metrics of a summary.json's (or W&B run summary's) metrics. A null or NaN
    test accuracy marks a failed run (its other metrics may be missing too); otherwise a
    required metric must be there, and the error says why it is not. `required=False` (a
    study, which reads accuracies only) takes what is there."""
    values = {m.key: _number(metrics.get(m.key)) for m in compared_metrics()}
    if not required or (TEST_ACC.key in metrics and values[TEST_ACC.key] is None):
        return values
    for metric in compared_metrics():
        if not metric.required or values[metric.key] is not None:
            continue
        if metric.key in metrics:
            cause = "is null or NaN (not finite, or not measured by this run)"
        elif version < metric.since:
            cause = (f"is absent: this summary has schema version {version}, older than the "
                     f"metric (version {metric.since}); rerun the run or leave it out with "
                     "--filter")
        else:
            cause = (f"is absent although schema version {version} always has it: not written "
                     "by linarena's train.py, or edited since")
        raise ValueError(f"{where}: metric {metric.key!r} {cause}")
    return values


def schema_version(summary: Mapping[str, Any], where: str) -> int:
    """The summary's format version (1 when it has none: written before versions existed)."""
    version = summary.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{where}: schema_version {version!r} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where}: schema version {version} is newer than this linarena reads "
                         f"({SCHEMA_VERSION}); update linarena")
    return version


def setting_accuracies(metrics: Mapping[str, Any]) -> dict[tuple[int, int], float]:
    """{(length, pairs): accuracy (NaN where the run diverged)} of a summary's metrics."""
    found = {}
    for key, value in metrics.items():
        match = SETTING.match(key)
        if match:
            found[int(match["length"]), int(match["pairs"])] = \
                float("nan") if value is None else float(value)
    return found


def record_from_summary(summary: Any, where: str, sweep: str = "runs",
                        required: bool = True) -> RunRecord:
    """A RunRecord from a parsed summary.json of any schema version; ``where`` names the file in
    error messages, ``sweep`` is used when the summary names none (written before sweeps were
    recorded); ``required`` as in read_metrics."""
    if not isinstance(summary, Mapping):
        raise ValueError(f"{where}: not a linarena summary.json (a JSON "
                         f"{type(summary).__name__}, not an object)")
    for key in ("task", "attention", "seed", "metrics"):
        if key not in summary:
            raise ValueError(f"{where}: key {key!r} is missing (is this a linarena summary.json?)")
    if not isinstance(summary["metrics"], Mapping):
        raise ValueError(f"{where}: metrics is not a JSON object (is this a linarena "
                         "summary.json?)")
    metrics = read_metrics(summary["metrics"], where, schema_version(summary, where), required)
    hparams = summary.get("hparams")
    hparams = hparams if isinstance(hparams, Mapping) else {}
    max_steps = hparams.get("max_steps")
    # Summaries written before hparams had it still hold it in their resolved config.
    positions = hparams.get("positions") or model_setting(summary.get("config"), "positions")
    machine = summary.get("machine") or {}
    config = summary.get("config")
    steps = summary.get("global_step")
    return RunRecord(
        task=str(summary["task"]), attention=str(summary["attention"]), seed=int(summary["seed"]),
        metrics=metrics, source=where, sweep=str(summary.get("sweep") or sweep),
        debug=bool(summary.get("debug", False)),
        max_steps=None if max_steps is None else int(max_steps),
        duration_s=_number(summary.get("duration_s")), cpu_s=_number(summary.get("cpu_s")),
        positions=None if positions is None else str(positions),
        commit=summary.get("commit"), cpu=machine.get("cpu"),
        cpu_kernels=machine.get("cpu_kernels"),
        val_acc_best=_number(summary["metrics"].get(VAL_ACC_BEST.key)),
        steps=None if steps is None else int(steps), env=machine.get("env"),
        config=config if isinstance(config, Mapping) else None,
        setting_accuracies=setting_accuracies(summary["metrics"]),
    )


def model_setting(config: Any, key: str) -> Any:
    """config["model"][key] of a resolved run config, or None."""
    model = config.get("model") if isinstance(config, Mapping) else None
    return model.get(key) if isinstance(model, Mapping) else None


def _folder_sweep(path: Path, root: Path) -> str:
    """For a summary.json without a sweep: the folder holding its run folder, relative to
    the searched folder (a multirun folder, or runs/)."""
    parent = path.parent.parent
    return str(parent.relative_to(root)) if parent != root and parent.is_relative_to(root) \
        else "runs"


def _portable_sweep(label: str, path: Path) -> str:
    """A sweep label whose folder is absolute (a multirun folder outside paths.log_dir, e.g.
    hydra.sweep.dir=my_sweeps/mqar) names it as the run was found, e.g.
    "my_sweeps/mqar: ...", so a table does not carry one machine's paths. A folder that
    holds no ancestor of ``path`` (runs moved elsewhere) keeps its label."""
    folder, separator, settings = label.partition(": ")
    if not Path(folder).is_absolute():
        return label
    for ancestor in path.parents:
        if ancestor.resolve() == Path(folder).resolve():
            return f"{ancestor}{separator}{settings}"
    return label


def parse_summary_file(path: Path) -> Any:
    """The parsed JSON of a summary.json file; malformed JSON is a ValueError naming the file
    and line."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: malformed JSON: {error.msg}") from error


def read_run(path: Path, required: bool = True) -> RunRecord:
    """The RunRecord of one summary.json file (record_from_summary; ``required`` as in
    read_metrics); a file that cannot be read is a ValueError naming it."""
    return record_from_summary(parse_summary_file(path), str(path), required=required)


def load_local_runs(
    dirs: Iterable[str | Path], filters: Mapping[str, Any], include_debug: bool = False
) -> list[RunRecord]:
    """Every summary.json under ``dirs`` (searched recursively) that matches ``filters``; debug
    runs only with ``include_debug``; no self-pretraining stage (is_classifier_run). A
    summary.json that cannot be read is an error naming the file."""
    paths: list[tuple[Path, Path]] = []
    for directory in map(Path, dirs):
        if not directory.is_dir():
            raise FileNotFoundError(f"--runs {directory}: no such folder")
        paths += [(path, directory) for path in sorted(directory.rglob("summary.json"))
                  if path.is_file()]
    if not paths:
        raise FileNotFoundError(
            f"no summary.json under {[str(d) for d in dirs]}; every training run writes one in "
            "its Hydra output folder (outputs/runs/<date>_<time>_<data>_<attention>/ or "
            "outputs/multiruns/<date>_<time>/<job>/)")
    records = []
    for path, root in paths:
        summary = parse_summary_file(path)
        if isinstance(summary, Mapping) and summary.get("debug") and not include_debug:
            continue
        if isinstance(summary, Mapping) and not is_classifier_run(summary):
            continue
        if not isinstance(summary, Mapping) or summary_matches(summary, filters):
            record = record_from_summary(summary, str(path), _folder_sweep(path, root))
            records.append(dataclasses.replace(record, sweep=_portable_sweep(record.sweep, path)))
    return records


def is_classifier_run(summary: Mapping[str, Any]) -> bool:
    """False for a summary.json that is not a classifier's result: a self-pretraining stage
    (pretrain.stage=pretrain, no classification), or a stage of a two-stage run, whose run
    folder's own summary.json stands for it (its "part_of_run")."""
    stage = (summary.get("pretrain") or {}).get("stage")
    return stage != "pretrain" and summary.get("part_of_run") is None


def drop_reruns(records: list[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """Within one sweep, two runs of one task, attention, positions and seed are a rerun of the
    same setting (e.g. `python train.py` twice): the last one found is kept, since runs are found
    in folder order and run folders are named by start time. Returns (kept, notes)."""
    kept: dict[tuple[str, str, str, int, str | None], RunRecord] = {}
    notes = []
    for record in sorted(records, key=lambda r: r.source):
        key = (record.sweep, record.task, record.attention, record.seed, record.positions)
        if key in kept:
            notes.append(f"{key[1]}/{key[2]}/seed {key[3]} in '{key[0]}' ran twice: using "
                         f"{record.source}, not {kept[key].source}")
        kept[key] = record
    return list(kept.values()), notes


def select_sweeps(records: list[RunRecord], chosen: Iterable[str]) -> list[RunRecord]:
    """The records of the chosen sweeps (each matched exactly or as the start of a label), or
    all of them when none is chosen."""
    chosen = list(chosen)
    if not chosen:
        return records
    labels = sorted({r.sweep for r in records})
    picked = {label for label in labels for want in chosen if label.startswith(want)}
    unmatched = [want for want in chosen if not any(label.startswith(want) for label in labels)]
    if unmatched:
        raise ValueError(f"--sweep {unmatched[0]!r} matches none of: {', '.join(labels)}")
    return [r for r in records if r.sweep in picked]
