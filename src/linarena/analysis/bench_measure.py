"""Measure one benchmark case (bench_cases): its time, tokens/s, peak memory and the code the
attention ran.

A case is measured in the current process by :func:`run_case`. On CPU the peak memory is the
growth of the process's peak resident set size (``ru_maxrss``) while the case runs. Linux lets a
process reset that peak to its current size (``/proc/self/clear_refs``), which we do first; where
that is not allowed the growth is only right in a fresh process whose imports are done. The runner
therefore starts one process per case with ``python -m linarena.analysis.bench_measure '<json>'``,
which prints one ``RESULT {json}`` line.
"""

from __future__ import annotations

import gc
import json
import sys
from contextlib import suppress
from pathlib import Path

import torch

from linarena.analysis.bench_cases import (
    PRETRAIN_STEP,
    CaseSpec,
    make_attention_fwd_bwd,
    make_model_step,
)
from linarena.analysis.bench_pretrain import make_pretrain_step
from linarena.analysis.timing import is_out_of_memory, time_fn
from linarena.attention.engine.backend import backend_used
from linarena.system import peak_rss_mb


def _reset_peak_rss_mb() -> float:
    """Reset the peak RSS to the current RSS where Linux allows it; returns the peak after."""
    with suppress(OSError):  # not Linux, or not allowed: keep the process's peak
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the RSS high-water mark
    return peak_rss_mb()


def run_case(spec: CaseSpec) -> dict:
    """Measure one case; returns ms, tokens_per_sec, peak_memory_mb, backend (the code the
    attention ran, see backend_used), status ("ok"|"oom"), note.

    Peak memory covers everything the case allocates: parameters, gradients, optimizer state,
    activations and inputs. CUDA: ``max_memory_allocated`` growth over the allocated memory
    before the case (peak statistics reset). CPU: ``ru_maxrss`` growth (see the module doc).
    """
    # Looked up at each call, so that a test may replace a maker in this module.
    makers = {"model_step": make_model_step, "attention_fwd_bwd": make_attention_fwd_bwd,
              PRETRAIN_STEP: make_pretrain_step}
    if spec.what not in makers:
        raise ValueError(f"unknown what {spec.what!r}; valid: {list(makers)}")
    device = torch.device(spec.device)
    on_cuda = device.type == "cuda"
    torch.set_num_threads(spec.threads)
    if on_cuda:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        memory_before_mb = torch.cuda.memory_allocated(device) / 2**20
    else:
        memory_before_mb = _reset_peak_rss_mb()
    try:
        fn, module = makers[spec.what](spec)
        seconds = time_fn(fn, warmup=spec.warmup, repeats=spec.repeats, device=device)
    except Exception as error:  # only allocation failures are results; anything else is a bug
        if not is_out_of_memory(error):
            raise
        del error  # drop the traceback, which holds the case's tensors
        if on_cuda:
            gc.collect()
            torch.cuda.empty_cache()
        return {"ms": None, "tokens_per_sec": None, "peak_memory_mb": None, "backend": "",
                "status": "oom", "note": "allocation failed (out of memory)"}
    if on_cuda:
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20 - memory_before_mb
    else:
        peak_mb = peak_rss_mb() - memory_before_mb
    return {
        "ms": seconds * 1000.0,
        "tokens_per_sec": spec.batch * spec.length / seconds,
        "peak_memory_mb": peak_mb,
        "backend": backend_used(module) or "torch",
        "status": "ok",
        "note": "",
    }


def main(argv: list[str]) -> None:
    """Subprocess entry: measure the case given as JSON and print ``RESULT {json}``."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m linarena.analysis.bench_measure '<CaseSpec json>'")
    result = run_case(CaseSpec.from_json(argv[0]))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
