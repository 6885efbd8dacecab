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


def peak_allocated_mb(fn: Callable[[], object], device: torch.device) -> float:
    """The most memory `fn` holds at once beyond what existed before it ran, in MB: every
    tensor it allocates (kept for backward, temporaries), counted from the allocator's own
    records, so the result does not depend on how the C library hands memory back to the OS.

    CUDA: the caching allocator's peak statistics. CPU: torch.profiler's memory records (each
    allocation and free with its size), summed in time order.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        fn()
    records = [event for event in profiler.profiler.kineto_results.events()
               if event.name() == "[memory]"]
    held = peak = 0
    for event in sorted(records, key=lambda event: event.start_ns()):
        held += event.nbytes()  # negative for a free
        peak = max(peak, held)
    return peak / 2**20
