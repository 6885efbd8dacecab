"""Where each committed result came from: docs/results/provenance.json.

One record per result file (CSV, table, figure), keyed by the file's name:

    {"commit": "<40 hex>", "dirty": false, "command": "python scripts/...",
     "environment": {"torch": "2.13.0", "device": "cpu", "threads": 2, "cpu": "...", ...},
     "recorded": "2026-12-02T03:00:00+00:00", "stale": null, "rows": 92}

`stale` is null or {"commit": ..., "reason": ...}: the code at that commit no longer gives the
file's numbers (a golden test said so, tests/training/test_golden_runs.py) and it was not rerun yet.
`rows` (CSV files only) is how many data rows the file held when it was written: the readers
(linarena.analysis.result_files) refuse a copy that holds another number.
The scripts that write results call `record` for every file they write; the provenance file
sits next to them, so a run with `--out docs/results` updates docs/results/provenance.json.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
import shlex
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from filelock import FileLock

from linarena.analysis.result_files import PROVENANCE_FILE, count_rows, read_provenance
from linarena.files import write_text_atomic
from linarena.system import REPO_ROOT, cpu_model, current_commit

PUBLISHED_DIR = REPO_ROOT / "docs" / "results"  # what the README publishes


def environment() -> dict[str, Any]:
    """What the numbers of this process depend on beyond the code: versions and hardware."""
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": "cuda" if cuda else "cpu",
        "threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "platform": platform.platform(),
    }


def command_line(script: str | Path, argv: Sequence[str] | None = None) -> str:
    """`python <script, relative to the repository> <argv>` as a shell would take it; argv
    defaults to this process's arguments."""
    script = Path(script).resolve()
    shown = script.relative_to(REPO_ROOT) if script.is_relative_to(REPO_ROOT) else script
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", str(shown), *map(shlex.quote, args)])


def trained_by(runs: pd.DataFrame) -> str:
    """A sentence on where a table's runs were trained (issue #26 item 5), from a runs table's
    `commit`, `cpu` and `cpu_kernels` columns (one row per run, or per `run` id): each commit,
    a "-dirty" one (a tree with uncommitted changes) named as such, and each machine, with its
    number of runs."""
    if "run" in runs.columns:
        runs = runs.drop_duplicates("run")

    def column(name: str) -> pd.Series:
        values = runs[name] if name in runs.columns else pd.Series(index=runs.index, dtype=str)
        return values.astype(object).where(values.notna(), "")

    def counted(values: pd.Series) -> str:
        counts = values.value_counts(sort=False)
        return ", ".join(f"{value} ({count:,} run{'s' * (count != 1)})"
                         for value, count in counts.items())

    commits = column("commit").replace("", "an unrecorded commit").astype(str).str.replace(
        r"^([0-9a-f]{10})[0-9a-f]{30}", r"\1", regex=True)
    kernels = column("cpu_kernels").map(lambda k: f", {k} kernels" if k else "")
    machines = (column("cpu") + kernels).replace("", "an unrecorded machine")
    dirty = commits.str.endswith("-dirty")
    return (f"Trained at {counted(commits)}; on {counted(machines)}; from a tree with "
            "uncommitted changes: " + (counted(commits[dirty]) if dirty.any() else "none") + ".")


def training_note(runs: pd.DataFrame, runs_file: str) -> str:
    """The paragraph under a study's caption: trained_by, and where each run's own train.py
    command is (the `command` column of `runs_file`)."""
    return (f"{trained_by(runs)} Each run's train.py command: the `command` column of "
            f"{runs_file}.\n\n")


def load(folder: Path = PUBLISHED_DIR) -> dict[str, dict[str, Any]]:
    """The records of `folder`/provenance.json ({} when there is none); a damaged file is a
    ResultFileError naming the position and how to restore it."""
    return read_provenance(folder)


def _update(folder: Path, change: Any) -> dict[str, dict[str, Any]]:
    """Read, change (a function of the records) and write back atomically, under a lock so
    that two scripts writing results into one folder do not lose each other's records."""
    folder.mkdir(parents=True, exist_ok=True)
    # The lock file lives in the temporary folder, keyed by the results folder's path, so that
    # none is left beside the results (one machine's writers share it; that is who races).
    key = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:16]
    with FileLock(str(Path(tempfile.gettempdir()) / f"linarena-provenance-{key}.lock")):
        records = load(folder)
        change(records)
        text = json.dumps(dict(sorted(records.items())), indent=2) + "\n"
        write_text_atomic(folder / PROVENANCE_FILE, text)
    return records


def record(paths: Iterable[str | Path], command: str) -> None:
    """Write a fresh record (this commit, `command` (see command_line), this environment; not
    stale; a CSV's number of rows) for every file in `paths`, into the provenance file of its
    folder. A CSV that does not parse whole is refused (ResultFileError)."""
    commit, dirty = current_commit()
    entry = {
        "commit": commit, "dirty": dirty, "command": command,
        "environment": environment(),
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "stale": None,
    }
    by_folder: dict[Path, dict[str, dict[str, Any]]] = {}
    for path in map(Path, paths):
        rows = {"rows": count_rows(path)} if path.suffix == ".csv" else {}
        by_folder.setdefault(path.resolve().parent, {})[path.name] = entry | rows

    for folder, entries in by_folder.items():
        def add(records: dict, entries: dict[str, dict[str, Any]] = entries) -> None:
            records.update(entries)
        _update(folder, add)


def mark_stale(name: str, reason: str, folder: Path = PUBLISHED_DIR) -> dict[str, Any]:
    """Mark result `name` stale at this commit, for `reason`; returns its record."""
    if not reason.strip():
        raise ValueError("say why the result is stale: --reason '<what changed>'")
    commit, _ = current_commit()

    def mark(records: dict) -> None:
        if name not in records:
            known = ", ".join(sorted(records)) or "none"
            raise ValueError(f"{name}: no provenance record in {folder / PROVENANCE_FILE} "
                             f"(records: {known})")
        records[name]["stale"] = {"commit": commit, "reason": reason.strip()}
    return _update(folder, mark)[name]


def stale_mark(path: Path) -> dict[str, Any] | None:
    """The stale mark ({"commit", "reason"}) of the result file `path` in its folder's
    provenance record; None when the file is current or has no record."""
    entry = load(path.parent).get(path.name)
    return entry.get("stale") if entry else None


def unrecorded(folder: Path = PUBLISHED_DIR) -> list[str]:
    """Result files in `folder` without a provenance record."""
    records = load(folder)
    return sorted(path.name for path in folder.iterdir()
                  if path.is_file() and not path.name.startswith(".")
                  and path.name != PROVENANCE_FILE and path.name not in records)

