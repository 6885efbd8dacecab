"""Normalisation of each head's output: the linear-attention denominator, or an RMS / group
norm of the output vector as the gated recurrences use (RetNet, GLA, Mamba-2, DeltaNet)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linarena.attention.recurrent.lean import rms_norm

OUTPUT_NORMS = ("denominator", "rms", "group", "none")
EPS = 1e-6


class OutputNorm(nn.Module):
    """Per token and head, over the head's head_dim output features (out: (..., head_dim)).

    kind: "rms" (RMSNorm with a learned weight: GLA, Mamba-2, DeltaNet), "group" (GroupNorm
    with one group per head, i.e. mean and variance over the head's features, learned weight and
    bias: RetNet), "none" or "denominator" (nothing here; the denominator is the divide by
    q . sum of decayed keys, which the module that owns the state computes). The weight and bias
    are shared by the heads (head_dim numbers each), as fla's per-head norms are.
    """

    def __init__(self, kind: str, head_dim: int) -> None:
        super().__init__()
        if kind not in OUTPUT_NORMS:
            raise ValueError(f"output_norm must be one of {list(OUTPUT_NORMS)}, got {kind!r}.")
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(head_dim)) if kind in ("rms", "group") else None
        self.bias = nn.Parameter(torch.zeros(head_dim)) if kind == "group" else None

    def forward(self, out: Tensor) -> Tensor:
        """out: (..., head_dim) -> (..., head_dim), in out's dtype."""
        if self.kind == "rms":
            return rms_norm(out, self.weight, EPS)
        if self.kind == "group":
            centred = out - out.mean(-1, keepdim=True)
            out = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + EPS)
            return out * self.weight.to(out.dtype) + self.bias.to(out.dtype)
        return out

    def extra_repr(self) -> str:
        return self.kind
