"""The per-head output norm of the published layers: RMSNorm over each head's features with a
weight shared by the heads, times swish of the output gate where the layer has one (fla's
RMSNorm and FusedRMSNormGated)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from linarena.attention.recurrent.lean import rms_norm


class GatedRMSNorm(nn.Module):
    """o / sqrt(mean(o^2) + eps) * weight [* silu(gate)] over the last dim (one head's)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, out: Tensor, gate: Tensor | None = None) -> Tensor:
        """out, gate: (..., dim) -> (..., dim), in out's dtype; gate None: no output gate."""
        out = rms_norm(out, self.weight, self.eps)
        return out if gate is None else out * F.silu(gate)
