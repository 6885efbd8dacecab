"""perf/peak_memory_mb is each run's own peak, also when one process trains several runs
(train.py -m): a small run after a large one reports its own, smaller, peak, also when the
large one left its freed memory in the C heap."""

from __future__ import annotations

import platform
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from linarena.metrics import PEAK_MEMORY_MB
from linarena.training import perf
from linarena.training.perf import PerfMonitor, reset_peak_memory

CPU = torch.device("cpu")


def run_peak_mb(megabytes: int) -> float:
    """The peak memory a PerfMonitor reports for a 'run' that holds `megabytes` of data."""
    monitor = PerfMonitor()
    trainer = SimpleNamespace(loggers=[], global_step=0, world_size=1)
    module = SimpleNamespace(device=CPU, parameters=lambda: [])
    monitor.on_train_start(trainer, module)
    data = np.ones(megabytes * 2**20 // 8)  # written, so resident
    monitor.on_train_end(trainer, module)
    del data
    return monitor.final_metrics()[PEAK_MEMORY_MB.key]


def test_a_small_run_after_a_large_one_reports_its_own_peak() -> None:
    if not reset_peak_memory(CPU):
        pytest.skip("this system cannot reset the peak RSS (/proc/self/clear_refs); the figure "
                    "is then the process's peak, as the README says")
    large = run_peak_mb(400)
    small = run_peak_mb(20)
    assert large - small > 300, (large, small)


def test_memory_an_earlier_run_freed_but_the_heap_kept_is_not_in_the_next_runs_peak() -> None:
    """Tensors below glibc's mmap threshold live in the heap; freed between small live ones,
    the heap keeps their pages (the resident set does not shrink). Before release_free_memory a
    run in a `train.py -m` process after a large one reported that memory as its own: in the
    sweeps, relu^2 read 1,650 MB after Mamba-2's layer and 984 MB alone."""
    if perf.glibc() is None or not reset_peak_memory(CPU):
        pytest.skip("no glibc malloc_trim or no resettable peak RSS on this system")
    freed, kept = [], []
    for _ in range(3000):
        freed.append(torch.ones(16 * 1024))  # 64 KiB each, 188 MiB in all
        kept.append(torch.ones(16))  # live between them: the heap cannot shrink from its top
    with_freed = perf.peak_memory_mb(CPU)
    del freed
    reset_peak_memory(CPU)
    assert with_freed - perf.peak_memory_mb(CPU) > 150


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_on_glibc_the_heap_is_trimmed() -> None:
    """Where the C library is glibc the trim must be found: were the lookup to fail, the test
    above would skip and CPU peaks under -m would again hold what earlier runs left."""
    assert perf.glibc() is not None
