"""fla's own pure-PyTorch references standing in for its Triton kernels on CPU (fla.ops imports
Triton; its naive.py files do not), for the tests of backend="fla"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from linarena.attention.engine import backend as fla


def naive(module: str):
    """fla/ops/<module>/naive.py, loaded by path: fla.ops itself imports Triton."""
    path = Path(importlib.util.find_spec("fla").origin).parent / "ops" / module / "naive.py"
    spec = importlib.util.spec_from_file_location(f"fla_naive_{module}", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def reference_kernels() -> fla.FlaKernels:
    """fla's references in the signatures of the chunk kernels they stand for."""
    simple, gla, gated_delta = naive("simple_gla"), naive("gla"), naive("gated_delta_rule")

    def simple_gla(q, k, v, g, **kwargs):  # chunk_simple_gla(g=None) is the ungated case
        g = torch.zeros(q.shape[:3]) if g is None else g
        return simple.naive_recurrent_simple_gla(q, k, v, g, **kwargs)

    def chunk_gla(q, k, v, g, scale, initial_state, output_final_state):
        # naive_recurrent_gla has the default scale built in: rescale q to get `scale`.
        q = q * (scale * q.shape[-1] ** 0.5)
        return gla.naive_recurrent_gla(q, k, v, g, initial_state, output_final_state)

    def delta(q, k, v, beta, **kwargs):  # the gated reference with log gate 0
        return gated_delta.naive_recurrent_gated_delta_rule(
            q, k, v, beta, torch.zeros_like(beta), **kwargs)

    return fla.FlaKernels(simple_gla, chunk_gla, delta,
                          gated_delta.naive_recurrent_gated_delta_rule)
