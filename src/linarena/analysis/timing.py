"""Wall-clock timing and out-of-memory detection shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable

import torch


def elapsed(fn: Callable[[], object], device: torch.device | str) -> float:
    """Wall-clock seconds of one ``fn()`` call.

    On CUDA the call is bracketed by CUDA events and synchronised, so the time is the GPU's
    time for the call and not the (asynchronous) launch time; on CPU ``time.perf_counter``.
    """
    if torch.device(device).type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    start_s = time.perf_counter()
    fn()
    return time.perf_counter() - start_s


def time_fn(
    fn: Callable[[], object], warmup: int, repeats: int, device: torch.device | str
) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls
    (see :func:`elapsed`)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    return statistics.median(elapsed(fn, device) for _ in range(repeats))


def interleaved_medians(
    fns: dict[Hashable, Callable[[], object]], repeats: int, device: torch.device | str
) -> dict[Hashable, float]:
    """Median seconds of each function, timed round-robin: repeat r times every function once
    before repeat r + 1 starts. On a shared or throttling machine the speed drifts over seconds;
    interleaving exposes every function to the same drift, so ratios between them hold even
    when the absolute times move. Warm the functions up first."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times: dict[Hashable, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            times[key].append(elapsed(fn, device))
    return {key: statistics.median(t) for key, t in times.items()}


def is_out_of_memory(error: BaseException) -> bool:
    """True for the errors PyTorch raises when an allocation fails (CUDA or CPU allocator)."""
    if isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    message = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in message or "can't allocate memory" in message
    )
