"""Where each committed result came from: docs/results/provenance.json.

One record per result file (CSV, table, figure), keyed by the file's name:

    {"commit": "<40 hex>", "dirty": false, "command": "python scripts/...",
     "environment": {"torch": "2.13.0", "device": "cpu", "threads": 2, "cpu": "...", ...},
     "recorded": "2026-12-02T03:00:00+00:00", "stale": null}

`stale` is null or {"commit": ..., "reason": ...}: the code at that commit no longer gives the
file's numbers (a golden test said so, tests/test_golden_runs.py) and it was not rerun yet.
The scripts that write results call `record` for every file they write; the provenance file
sits next to them, so a run with `--out docs/results` updates docs/results/provenance.json.
"""

from __future__ import annotations

import datetime
import json
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from linarena.files import write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[3]
RESULTS_DIR = REPO_ROOT / "docs" / "results"
PROVENANCE_FILE = "provenance.json"


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


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


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def current_commit() -> tuple[str | None, bool]:
    """(HEAD's hash, whether tracked files other than the results themselves differ from it);
    (None, False) outside a checkout. A rerun rewrites docs/results/ before its record is
    written, which is no change to the code that produced it."""
    if not (REPO_ROOT / ".git").exists():  # an installed copy: a parent folder's repository
        return None, False                 # (e.g. a project holding the venv) is not ours
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                   ":(exclude)docs/results")
    return commit, bool(changes)


def code_version() -> str | None:
    """The commit this process's code is, with "-dirty" when tracked files differ from it
    (docs/results/ aside); None outside a checkout."""
    commit, dirty = current_commit()
    return None if commit is None else commit + ("-dirty" if dirty else "")


def command_line(script: str | Path, argv: Sequence[str] | None = None) -> str:
    """`python <script, relative to the repository> <argv>` as a shell would take it; argv
    defaults to this process's arguments."""
    script = Path(script).resolve()
    shown = script.relative_to(REPO_ROOT) if script.is_relative_to(REPO_ROOT) else script
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", str(shown), *map(shlex.quote, args)])


def load(folder: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    """The records of `folder`/provenance.json ({} when there is none)."""
    path = folder / PROVENANCE_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _update(folder: Path, change: Any) -> dict[str, dict[str, Any]]:
    """Read, change (a function of the records) and write back atomically, under a lock so
    that two scripts writing results into one folder do not lose each other's records."""
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / f".{PROVENANCE_FILE}.lock")):
        records = load(folder)
        change(records)
        text = json.dumps(dict(sorted(records.items())), indent=2) + "\n"
        write_text_atomic(folder / PROVENANCE_FILE, text)
    return records


def record(paths: Iterable[str | Path], command: str) -> None:
    """Write a fresh record (this commit, `command` (see command_line), this environment; not
    stale) for every file in `paths`, into the provenance file of its folder."""
    commit, dirty = current_commit()
    entry = {
        "commit": commit, "dirty": dirty, "command": command,
        "environment": environment(),
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "stale": None,
    }
    by_folder: dict[Path, list[str]] = {}
    for path in map(Path, paths):
        by_folder.setdefault(path.resolve().parent, []).append(path.name)

    for folder, names in by_folder.items():
        def add(records: dict, names: list[str] = names) -> None:
            for name in names:
                records[name] = dict(entry)
        _update(folder, add)


def mark_stale(name: str, reason: str, folder: Path = RESULTS_DIR) -> dict[str, Any]:
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


def unrecorded(folder: Path = RESULTS_DIR) -> list[str]:
    """Result files in `folder` without a provenance record."""
    records = load(folder)
    return sorted(path.name for path in folder.iterdir()
                  if path.is_file() and not path.name.startswith(".")
                  and path.name != PROVENANCE_FILE and path.name not in records)

