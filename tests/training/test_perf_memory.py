"""perf/peak_memory_mb is each run's own peak, also when one process trains several runs
(train.py -m): a small run after a large one reports its own, smaller, peak."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from linarena.metrics import PEAK_MEMORY_MB
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
