"""Wall-clock timing and out-of-memory detection shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_fn(
    fn: Callable[[], object], warmup: int, repeats: int, device: torch.device | str
) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls.

    On CUDA each call is bracketed by CUDA events and synchronised, so the time is the GPU's
    time for the call and not the (asynchronous) launch time; on CPU ``time.perf_counter``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = torch.device(device)
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
    else:
        for _ in range(repeats):
            start_s = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start_s)
    return statistics.median(times)


def is_out_of_memory(error: BaseException) -> bool:
    """True for the errors PyTorch raises when an allocation fails (CUDA or CPU allocator)."""
    if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    message = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in message or "can't allocate memory" in message
    )
