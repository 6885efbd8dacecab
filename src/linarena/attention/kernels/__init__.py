"""Linear-attention kernels: the algorithm, on features a FeatureMap computed once, in three
forms.

A backend is a set of three functions with the signatures of the PyTorch ones:
  - bidirectional(phi_q, phi_k, v, query_log_scale, key_log_scale, mask, eps) -> out
  - causal(phi_q, phi_k, v, query_log_scale, key_log_scale, mask, eps, chunk_size, state)
    -> (out, state)
  - step(phi_q, phi_k, v, query_log_scale, key_log_scale, state, eps) -> (out, state)
They never call the map: a fused kernel takes the same tensors. LinearAttention picks one by
name (its `backend` argument). "torch" (bidirectional.py, chunked_causal.py, recurrent.py) is
the reference every other backend is tested against; a fused GPU backend is one more file here
and one entry in BACKENDS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from linarena.attention.kernels.bidirectional import bidirectional
from linarena.attention.kernels.chunked_causal import chunked_causal
from linarena.attention.kernels.common import LinearAttentionState
from linarena.attention.kernels.recurrent import recurrent_step


@dataclass(frozen=True)
class Backend:
    """The three kernels of one implementation."""

    bidirectional: Callable
    causal: Callable
    step: Callable


BACKENDS = {"torch": Backend(bidirectional, chunked_causal, recurrent_step)}


def get_backend(name: str) -> Backend:
    """The backend called `name`; a clear error for an unknown one."""
    if name not in BACKENDS:
        raise ValueError(f"unknown linear-attention backend {name!r}; valid: {sorted(BACKENDS)}.")
    return BACKENDS[name]


__all__ = ["BACKENDS", "Backend", "LinearAttentionState", "get_backend"]
