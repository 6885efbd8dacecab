"""The machine and the code this process runs: CPUs, peak resident memory, the CPU model and the
git commit of the code. Below every other module (it imports none of the project), so training,
the studies and the provenance records all read these facts from one place."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

# The repository of this checkout (src/linarena/system.py is three levels below it).
REPO_ROOT = Path(__file__).resolve().parents[2]


def available_cpus() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average of the machine (processes running or waiting for a CPU), or
    None where the OS has none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, else KiB


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what platform knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


# The environment variables that change a CPU run's numbers: the threads its sums are split
# over, the CPU kernels ATen dispatches to, MKL's reproducibility mode.
NUMERICS_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "MKL_CBWR")


def machine(device: str) -> dict[str, Any]:
    """What a run's numbers depend on beyond the code and the seed: the CPU model, the CPU
    kernels PyTorch dispatches to (its CPU capability, which ATEN_CPU_CAPABILITY overrides),
    MKL's reproducibility mode (MKL_CBWR), torch's threads and the NUMERICS_ENV variables set
    (`env`: what a command must set to run the same way), the GPU on a "cuda" device, and
    torch's version. Across CPUs the last bits of a matmul differ, which can move a seed across
    a plateau."""
    import torch  # here, not at the top: this module stays importable without torch's cost

    return {"cpu": cpu_model(), "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": os.environ.get("MKL_CBWR"), "threads": torch.get_num_threads(),
            "env": {name: os.environ[name] for name in NUMERICS_ENV if name in os.environ},
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
            "torch": torch.__version__}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def current_commit() -> tuple[str | None, bool]:
    """(HEAD's hash, whether tracked files other than the results themselves differ from it);
    (None, False) outside a checkout. A rerun rewrites docs/results/ (a report card
    docs/cards/) before its record is written, which is no change to the code that produced
    it."""
    if not (REPO_ROOT / ".git").exists():  # an installed copy: a parent folder's repository
        return None, False                 # (e.g. a project holding the venv) is not ours
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                   ":(exclude)docs/results", ":(exclude)docs/cards")
    return commit, bool(changes)


def code_version() -> str | None:
    """The commit this process's code is, with "-dirty" when tracked files differ from it
    (docs/results/ and docs/cards/ aside); None outside a checkout."""
    commit, dirty = current_commit()
    return None if commit is None else commit + ("-dirty" if dirty else "")


def human_bytes(n_bytes: float) -> str:
    """A byte count for people: 512 B, 3.4 GB."""
    for unit in ("B", "KB", "MB", "GB"):
        if n_bytes < 1000:
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.1f} TB"
