"""The process environment and the machine, as a run sees them: environment variables set but
empty, a machine busier than its CPUs, and OS errors caused by the machine (a full disk, a
read-only folder) in one line."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from pathlib import Path

from linarena.run_lock import is_other_rank
from linarena.system import available_cpus, human_bytes, load_average

log = logging.getLogger(__name__)

# Variables read as settings, for which empty means unset, as in most shells' idiom
# `VAR= command`: wandb rejects an empty WANDB_MODE; an empty LINARENA_DATA_DIR or LINARENA_ROOT
# would put data and outputs in the current folder or at the file system's root.
EMPTY_MEANS_UNSET = ("WANDB_MODE", "LINARENA_DATA_DIR", "LINARENA_ROOT")


def normalise_environment() -> None:
    """Remove the variables of EMPTY_MEANS_UNSET that are set to an empty string."""
    for name in EMPTY_MEANS_UNSET:
        if os.environ.get(name) == "":
            del os.environ[name]


def warn_if_busy() -> None:
    """Warn, in one line, when the machine's 1-minute load average is above the CPUs this
    process may use: other processes then share them, and the run trains slower than usual
    (the default run took 1,614 s at load 8 on 2 CPUs instead of 80 s, at the same accuracy),
    so its tokens/s says little of the attention. Said by the first rank only."""
    load, cpus = load_average(), available_cpus()
    if load is None or load <= cpus or is_other_rank():
        return
    log.warning("The machine is busy: load average %.1f over the last minute on the %d CPU%s "
                "this run may use, so it will train slower than usual and its tokens/s says "
                "little (accuracy is not affected); compare speed with runs on an idle machine.",
                load, cpus, "" if cpus == 1 else "s")


def free_space(folder: Path) -> str:
    """Free space on the filesystem of `folder` (or of its nearest existing parent)."""
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    return human_bytes(shutil.disk_usage(existing).free)


def os_error_message(err: OSError, needed_bytes: int | None = None) -> str:
    """One line for an OSError caused by the machine: which folder, what to do."""
    path = Path(err.filename) if err.filename else None
    folder = (path.parent if path is not None and not path.is_dir() else path) or Path.cwd()
    where = f"writing {path}" if path is not None else "writing a file"
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        need = f"about {human_bytes(needed_bytes)} was needed, " if needed_bytes else ""
        return (
            f"No space left on the device (or over quota) while {where}: {need}"
            f"{free_space(folder)} is free in {folder}. Free some space there, or point the run "
            "elsewhere (paths.data_dir=... or LINARENA_DATA_DIR for data, hydra.run.dir=... "
            "for the run)."
        )
    if err.errno == errno.EROFS:
        return (
            f"The folder {folder} is on a read-only file system ({where}). Point the run at a "
            "writable folder: paths.data_dir=... (or LINARENA_DATA_DIR) for data, "
            "hydra.run.dir=... for the run."
        )
    return (
        f"Permission denied {where} (folder {folder}). Make it writable for this user or point "
        "the run elsewhere: paths.data_dir=... for data, hydra.run.dir=... for the run."
    )
