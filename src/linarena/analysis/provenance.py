"""Where each committed result came from: docs/results/provenance.json.

One record per result file (CSV, table, figure), keyed by the file's name:

    {"commit": "<40 hex>", "dirty": false, "command": "python scripts/...",
     "environment": {"torch": "2.13.0", "device": "cpu", "threads": 2, "cpu": "...", ...},
     "recorded": "2026-12-02T03:00:00+00:00", "stale": null, "rows": 92}

`stale` is null or {"commit": ..., "reason": ...}: the code at that commit no longer gives the
file's numbers (a golden test said so, tests/training/test_golden_runs.py) and it was not rerun yet.
`rows` (CSV files only) is how many data rows the file held when it was written: the readers
(linarena.analysis.result_files) refuse a copy that holds another number. `sha256` is the
checksum of the file as written: `problems` (provenance.py --check) names a file edited since.
The scripts that write results call `record` for every file they write; the provenance file
sits next to them, so a run with `--out docs/results` updates docs/results/provenance.json.

A record leads back to the runs: a report made from runs trained earlier (a --report-only
rewrite from a runs CSV) is recorded as "<the commands that trained the runs>; then <the report
command>" (THEN). A record whose only command reads the file it made (reads_own_output) says
nothing of where the numbers came from: `record` carries the training part of the file's
earlier record over to it, and `problems` refuses one that has none.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import os
import platform
import shlex
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from filelock import FileLock

from linarena.analysis.result_files import PROVENANCE_FILE, count_rows, read_provenance
from linarena.analysis.results_captions import THEN
from linarena.files import write_text_atomic
from linarena.system import NUMERICS_ENV, REPO_ROOT, cpu_model, current_commit

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


# What a timing depends on beyond the code and the machine: the variables that change numerics
# (threads, CPU kernels) and OpenMP's wait policy (spinning threads slow a shared machine).
TIMING_ENV = (*NUMERICS_ENV, "OMP_WAIT_POLICY")


def with_env(command: str) -> str:
    """`command` led by the TIMING_ENV variables this process has set, so that a record of
    timings says how to rerun them."""
    return " ".join([*(f"{name}={os.environ[name]}" for name in TIMING_ENV
                       if name in os.environ), command])


def trained_by(runs: pd.DataFrame) -> str:
    """A sentence on where a table's runs were trained, from a runs table's
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


def checksum(path: Path) -> str:
    """The SHA-256 of the file's bytes, as a record keeps it."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def reads_own_output(name: str, command: str) -> bool:
    """Whether `command` is only a rewrite of the file `name` from itself: its report part (the
    whole command, or what follows the last THEN) names a file called `name` among its
    arguments and no training part comes before it."""
    training, then, report = command.rpartition(THEN)
    if then and training.strip():
        return False
    try:
        words = shlex.split(report)
    except ValueError:  # not shell syntax: nothing to read from it
        return False
    # What the command writes (--out) is not what it reads.
    read = [word for before, word in itertools.pairwise(words)
            if before != "--out" and not word.startswith("--out=")]
    return any(Path(word.partition("=")[2] or word).name == name for word in read)


def with_training(name: str, command: str, earlier: dict[str, Any] | None) -> str:
    """`command`, led by the training part of the file's `earlier` record when `command` only
    rewrites the file from itself (reads_own_output) and that record has one."""
    if not reads_own_output(name, command) or earlier is None:
        return command
    training, then, _ = earlier["command"].rpartition(THEN)
    return f"{training}{THEN}{command}" if then and training.strip() else command


def record(paths: Iterable[str | Path], command: str) -> None:
    """Write a fresh record (this commit, `command` (see command_line), this environment; not
    stale; a CSV's number of rows; the file's checksum) for every file in `paths`, into the
    provenance file of its folder. A file rewritten from itself keeps the training commands of
    its earlier record (with_training). A CSV that does not parse whole is refused
    (ResultFileError)."""
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
        by_folder.setdefault(path.resolve().parent, {})[path.name] = \
            entry | rows | {"sha256": checksum(path)}

    for folder, entries in by_folder.items():
        def add(records: dict, entries: dict[str, dict[str, Any]] = entries) -> None:
            for name, fresh in entries.items():
                records[name] = fresh | {
                    "command": with_training(name, fresh["command"], records.get(name))}
        _update(folder, add)


def remove_results(paths: Iterable[str | Path]) -> None:
    """Delete result files that their script no longer writes, with their records, under the
    lock `record` takes: no record is left for a file that is gone."""
    by_folder: dict[Path, list[Path]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.resolve().parent, []).append(path)

    for folder, files in by_folder.items():
        def drop(records: dict, files: list[Path] = files) -> None:
            for path in files:
                records.pop(path.name, None)
                path.unlink(missing_ok=True)
        _update(folder, drop)


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


def problems(folder: Path = PUBLISHED_DIR) -> list[str]:
    """What makes the records of `folder` untrustworthy, one line per file: a file without a
    record, a record without a checksum or whose checksum the file no longer has (edited after
    it was written), a record whose command only reads the file it made (reads_own_output)."""
    found = [f"{name}: no provenance record; rerun the script that writes it with --out "
             f"{folder}" for name in unrecorded(folder)]
    for name, entry in load(folder).items():
        path = folder / name
        if not path.is_file():
            continue
        if "sha256" not in entry:
            found.append(f"{name}: its record has no checksum; rerun its command (listed by "
                         "scripts/maintainer/provenance.py) so that the record is written anew")
        elif entry["sha256"] != checksum(path):
            found.append(f"{name}: changed after it was recorded (its SHA-256 is not the "
                         f"record's): `git restore {path}`, or rerun its command")
        if reads_own_output(name, entry["command"]):
            shown = textwrap.shorten(entry["command"], 160, placeholder=" ...")
            found.append(f"{name}: its record's command only reads the file it made "
                         f"(`{shown}`), not the commands that trained its runs: "
                         "rerun the report with --runs-command '<the command that trained "
                         "the runs>'")
    return found


def unrecorded(folder: Path = PUBLISHED_DIR) -> list[str]:
    """Result files in `folder` without a provenance record."""
    records = load(folder)
    return sorted(path.name for path in folder.iterdir()
                  if path.is_file() and not path.name.startswith(".")
                  and path.name != PROVENANCE_FILE and path.name not in records)

