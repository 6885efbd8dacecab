"""LinearAttention: one module for every kernelised variant. A variant is a subclass that
supplies its feature map (see feature_maps.py), and optionally its analytic backward; the
algorithm lives once: bidirectional in bidirectional_kernel.py, chunked causal and the
recurrent step in linear_kernels.py."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from linarena.attention.bidirectional_kernel import bidirectional_linear_attention
from linarena.attention.feature_maps import FeatureOutput
from linarena.attention.linear_kernels import (
    FeatureFn,
    FeatureVjp,
    LinearAttentionState,
    causal_linear_attention,
    recurrent_step,
)
from linarena.attention.validation import check_attention_inputs

# Rows per chunk in bidirectional mode: large enough for efficient matmuls, small enough that
# each elementwise pass stays in cache and buffers come from the allocator's free lists.
BIDIRECTIONAL_CHUNK = 1024


class LinearAttention(nn.Module):
    """out_i = phi(q_i) S / (phi(q_i) . z + eps) with S = sum_j phi(k_j) v_j^T, z = sum_j phi(k_j).

    Inputs of any floating dtype are computed in float32 (float64 stays float64) with autocast
    off, so the state and the normaliser accumulate in full precision; the output is cast back.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        eps: added to the normaliser, which can be 0 for maps with zeros (relu).
        chunk_size: tokens per chunk of the causal algorithm (exact attention inside a chunk,
            a carried state across chunks).
    """

    def __init__(
        self, head_dim: int, causal: bool = False, eps: float = 1e-6, chunk_size: int = 64
    ) -> None:
        super().__init__()
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        self.head_dim = head_dim
        self.causal = causal
        self.eps = eps
        self.chunk_size = chunk_size

    def feature_map(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        """phi of x (batch, heads, n, head_dim) at absolute `positions` (n,). See feature_maps.

        `context` is what feature_context returned for this call. `out` (batch, heads, n,
        num_features), when given, is a buffer the map may write phi into (and return) instead
        of allocating: the kernels reuse one buffer for every chunk.
        """
        raise NotImplementedError

    def feature_map_vjp(self, context: Any) -> FeatureVjp | None:
        """The analytic backward of feature_map (see linear_kernels.FeatureVjp), or None to
        differentiate a recomputation of it with autograd. Optional: a speed-up only."""
        return None

    def feature_context(self, mask: Tensor | None, batch: int, length: int, device) -> Any:
        """What the feature map needs that is fixed for one call, its backward included
        (cosFormer's per-sequence M, Performer's projection), or None."""
        return None

    def _features(self, context: Any) -> FeatureFn:
        """The feature map of one call, in the kernels' signature."""

        def features(
            x: Tensor, positions: Tensor, is_query: bool, out: Tensor | None = None
        ) -> FeatureOutput:
            return self.feature_map(x, positions, context, is_query, out)

        return features

    def check_length(self, length: int) -> None:
        """Raise if `length` tokens cannot be handled (cosFormer's causal max_length)."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """q, k, v: (batch, heads, length, head_dim); mask: bool (batch, length), True = real.

        Returns (batch, heads, length, head_dim).
        """
        check_attention_inputs(q, k, v, mask, self.head_dim, type(self).__name__)
        batch, _, length, _ = q.shape
        self.check_length(length)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_context(mask, batch, length, q.device)
            features = self._features(context)
            out_dtype = v.dtype
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
            if self.causal:
                out = causal_linear_attention(q, k, v, mask, features, self.eps, self.chunk_size)
            else:
                out = bidirectional_linear_attention(
                    q, k, v, mask, features, self.eps, BIDIRECTIONAL_CHUNK,
                    self.feature_map_vjp(context),
                )
        return out.to(out_dtype)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None = None
    ) -> tuple[Tensor, LinearAttentionState]:
        """Recurrent form of causal mode: one token at a time, same outputs as forward().

        q, k: (batch, heads, head_dim); v: (batch, heads, head_dim); state: None for the first
        token, then the state returned by the previous call. Returns (output (batch, heads,
        head_dim), new state).
        """
        if not self.causal:
            raise RuntimeError(
                f"{type(self).__name__}.step() is the recurrent form of causal attention; "
                "build the module with causal=True."
            )
        if q.dim() != 3 or k.shape != q.shape or v.shape[:2] != q.shape[:2]:
            raise ValueError(
                "step() takes one token: q, k, v of shape (batch, heads, head_dim), got "
                f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}."
            )
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"step(): q has last dim {q.shape[-1]}, expected {self.head_dim}.")
        position = 0 if state is None else state.position
        self.check_length(position + 1)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_context(None, q.shape[0], position + 1, q.device)
            out, state = recurrent_step(
                q.to(dtype), k.to(dtype), v.to(dtype), state, self._features(context), self.eps
            )
        return out.to(v.dtype), state

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, causal={self.causal}"
