"""Throughput and memory measurement: samples/s and real tokens/s of the training steps, peak
memory of the run, parameter count; under DDP the final throughput counts every rank.

Peak memory of the run: on CUDA the peak of tensor memory, reset when training starts, so each
job of one `train.py -m` process has its own; on CPU the peak resident set size of the process
since training started (Linux: the heap's free pages are handed back to the OS, glibc's
malloc_trim, then the high-water mark VmHWM is reset by writing "5" to /proc/self/clear_refs and
later read from /proc/self/status). Under -m that CPU figure still holds what earlier jobs left
resident (scripts/maintainer/multirun_memory.py measures how much), so the published sweeps
train each run in its own process. Where the mark cannot be reset (other systems, a kernel
without it), the figure is the process's peak since it started (ru_maxrss).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import re
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.distributed import ReduceOp

from linarena.metrics import PARAMS, PEAK_MEMORY_MB, SAMPLES_PER_SEC, TOKENS_PER_SEC
from linarena.system import peak_rss_mb
from linarena.training.log_steps import logs_this_step


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (it has malloc_trim); None elsewhere. Looked up
    on first use, from the symbols already loaded: no search (ctypes.util.find_library would
    start ldconfig or a compiler at import)."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):  # TypeError: Windows takes no None
        return None
    return libc if hasattr(libc, "malloc_trim") else None


PROC_STATUS = Path("/proc/self/status")
PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


def release_free_memory() -> None:
    """Collect Python's garbage and hand the C heap's free pages back to the OS (glibc's
    malloc_trim), so that the resident set holds only live memory: memory an earlier job of
    the same process freed but the heap kept would count in this run's peak otherwise."""
    gc.collect()
    libc = glibc()
    if libc is not None:
        libc.malloc_trim(0)


def reset_peak_memory(device: torch.device) -> bool:
    """Start a new peak: CUDA's peak statistics, or on CPU the process's resident-set high-water
    mark (Linux), after release_free_memory. Returns False when the CPU mark cannot be reset
    (then the peak read later is the process's since it started)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    release_free_memory()
    try:
        PROC_CLEAR_REFS.write_text("5")  # 5: reset the peak RSS to the current RSS
    except OSError:
        return False
    return True


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory since the last reset_peak_memory, in MB: tensors allocated on `device` (CUDA),
    else the process's peak resident set size (VmHWM where readable, else ru_maxrss)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        match = _HWM.search(PROC_STATUS.read_text())
    except OSError:
        match = None
    return int(match.group(1)) / 2**10 if match else peak_rss_mb()


class PerfMonitor(Callback):
    """Times each training batch from on_train_batch_start to on_train_batch_end (forward,
    backward and optimizer step; data loading excluded), synchronising CUDA at both ends.

    Logs running averages perf/samples_per_sec and perf/tokens_per_sec (real tokens: mask.sum()),
    perf/peak_memory_mb on the steps that reach the loggers (log_steps.logs_this_step), and
    model/params once at the start. The first `skip_batches` batches
    are left out of the averages (allocator warm-up, kernel selection) when there are more.
    """

    def __init__(self, skip_batches: int = 1) -> None:
        self.skip_batches = skip_batches
        self.num_params = 0
        self._start = 0.0
        self._batches = 0
        self._seconds = 0.0
        self._samples = 0
        self._tokens = 0
        self._first: tuple[float, int, int] | None = None
        self._device = torch.device("cpu")
        self.world_size = 1
        self._global: dict[str, float] | None = None
        self._peak_at_end: float | None = None

    def _sync(self, pl_module: LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._device = pl_module.device
        reset_peak_memory(pl_module.device)
        self.num_params = sum(p.numel() for p in pl_module.parameters())
        for logger in trainer.loggers:
            logger.log_metrics({PARAMS.key: float(self.num_params)}, step=trainer.global_step)

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._sync(pl_module)
        self._start = time.perf_counter()

    def on_train_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._sync(pl_module)
        seconds = time.perf_counter() - self._start
        samples = int(batch["tokens"].shape[0])
        tokens = int(batch["mask"].sum().item())
        self._batches += 1
        if self._batches <= self.skip_batches:
            if self._first is None:
                self._first = (seconds, samples, tokens)
            return
        self._seconds += seconds
        self._samples += samples
        self._tokens += tokens
        if not logs_this_step(trainer):  # the averages cover every step all the same
            return
        for name, value in self.averages().items():
            pl_module.log(name, value, on_step=True, on_epoch=False,
                          prog_bar=name == TOKENS_PER_SEC.key)

    def _totals(self) -> tuple[float, int, int]:
        if self._seconds == 0.0 and self._first is not None:
            # Fewer batches than skip_batches + 1: the warm-up batch is all there is.
            return self._first
        return self._seconds, self._samples, self._tokens

    def averages(self) -> dict[str, float]:
        """Running perf/samples_per_sec, perf/tokens_per_sec and perf/peak_memory_mb of this
        process (one DDP rank)."""
        seconds, samples, tokens = self._totals()
        return {
            SAMPLES_PER_SEC.key: samples / seconds if seconds > 0 else 0.0,
            TOKENS_PER_SEC.key: tokens / seconds if seconds > 0 else 0.0,
            PEAK_MEMORY_MB.key: peak_memory_mb(self._device),
        }

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Gathers every rank's totals (every rank gets here): the global throughput is all
        ranks' samples and tokens over the slowest rank's time."""
        self.world_size = trainer.world_size
        self._peak_at_end = peak_memory_mb(self._device)  # of training, not of the test after it
        if trainer.world_size == 1:
            return
        seconds, samples, tokens = self._totals()
        device = pl_module.device
        counts = trainer.strategy.reduce(
            torch.tensor([samples, tokens], dtype=torch.float64, device=device), reduce_op="sum")
        slowest = float(trainer.strategy.reduce(
            torch.tensor(seconds, dtype=torch.float64, device=device), reduce_op=ReduceOp.MAX))
        self._global = {
            SAMPLES_PER_SEC.key: float(counts[0]) / slowest if slowest else 0.0,
            TOKENS_PER_SEC.key: float(counts[1]) / slowest if slowest else 0.0,
        }

    def final_metrics(self) -> dict[str, float]:
        """The run's throughput for summary.json and the W&B summary: over all DDP ranks
        (samples/s, tokens/s), peak memory of this process's device during training, parameter
        count."""
        final = {**self.averages(), **(self._global or {}), PARAMS.key: float(self.num_params)}
        if self._peak_at_end is not None:
            final[PEAK_MEMORY_MB.key] = self._peak_at_end
        return final
