"""LinearAttention: one module for every kernelised variant, composed of a FeatureMap (the
variant) and a kernel backend (the algorithm, attention/kernels/)."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from linarena.attention.feature_map import FeatureMap
from linarena.attention.kernels import LinearAttentionState, get_backend
from linarena.attention.recurrent.output_norm import OutputNorm
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
        feature_map: phi. The module keeps its own deep copy and calls its setup(head_dim,
            causal), so layers built from one map object (as Hydra builds a nested config
            inside a `_partial_`) never share a projection or parameters.
        eps: added to the normaliser, which can be 0 for maps with zeros (relu).
        chunk_size: tokens per chunk of the causal algorithm (exact attention inside a chunk,
            a carried state across chunks).
        backend: the kernels (see linarena.attention.kernels.BACKENDS); "torch" is the
            reference implementation.
        output_norm: "denominator" (the division above, only) or "rms" / "group": that
            division, then an RMS or group norm of each head's output, as the gated variants
            use (linarena.attention.recurrent.output_norm).
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        *,
        feature_map: FeatureMap,
        eps: float = 1e-6,
        chunk_size: int = 64,
        backend: str = "torch",
        output_norm: str = "denominator",
    ) -> None:
        super().__init__()
        if output_norm == "none":
            raise ValueError("LinearAttention always divides by its denominator: output_norm "
                             "must be denominator, rms or group, got none.")
        if not isinstance(feature_map, FeatureMap):
            raise TypeError(
                "LinearAttention needs feature_map=<a linarena.attention.FeatureMap>, got "
                f"{type(feature_map).__name__}."
            )
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        self.kernels = get_backend(backend)
        self.head_dim = head_dim
        self.causal = causal
        self.eps = eps
        self.chunk_size = chunk_size
        self.backend = backend
        self.feature_map = copy.deepcopy(feature_map)
        self.feature_map.setup(head_dim, causal)
        self.output_norm = OutputNorm(output_norm, head_dim)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """q, k, v: (batch, heads, length, head_dim); mask: bool (batch, length), True = real.

        Returns (batch, heads, length, head_dim).
        """
        check_attention_inputs(q, k, v, mask, self.head_dim, type(self).__name__)
        if self.training:
            self.feature_map.on_training_call()
        batch, _, length, _ = q.shape
        self.feature_map.check_length(length)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_map.context(mask, batch, length, q.device)
            out_dtype = v.dtype
            q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
            if self.causal:
                out = self.kernels.causal(
                    q, k, v, mask, self.feature_map, context, self.eps, self.chunk_size
                )
            else:
                out = self.kernels.bidirectional(
                    q, k, v, mask, self.feature_map, context, self.eps, BIDIRECTIONAL_CHUNK
                )
            out = self.output_norm(out)
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
        self.feature_map.check_length(position + 1)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            context = self.feature_map.context(None, q.shape[0], position + 1, q.device)
            out, state = self.kernels.step(
                q.to(dtype), k.to(dtype), v.to(dtype), state, self.feature_map, context, self.eps
            )
            out = self.output_norm(out)
        return out.to(v.dtype), state

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, causal={self.causal}"
