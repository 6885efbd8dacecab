"""RetNet's retention (Sun et al. 2023): a linear-attention state with a fixed decay per head."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.recurrent.core import Recurrence, RecurrentAttention
from linarena.attention.rotation import Rotation


def retnet_log_decay(heads: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """log gamma_h, gamma_h = 1 - 2^(-5-h) for h = 0 .. heads - 1: (heads,)."""
    h = torch.arange(heads, dtype=dtype, device=device)
    return torch.log1p(-torch.exp2(-5.0 - h))


class RetNetAttention(RecurrentAttention):
    """S_t = gamma_h S_{t-1} + k_t v_t^T, o_t = GroupNorm(S_t^T q_t / sqrt(head_dim)).

    The decay depends on the head only, not on the token (reads_token is False). Not here, from
    the RetNet layer: the swish output gate of x, and xPos's rotation of q and k unless the
    model's positions are rope (rotary).

    Args:
        head_dim, causal: as every attention core.
        output_norm: "group" (RetNet's GroupNorm, one group per head), or another
            linarena.attention.recurrent.output_norm kind.
        backend: "auto", "torch" or "fla" (see RecurrentAttention).
        rotary: relative positions (see RecurrentAttention): model.positions=rope rotates q and
            k as RetNet's xPos does, without its per-position scale.
    """

    reads_token = False

    def __init__(self, head_dim: int, causal: bool = False, *, output_norm: str = "group",
                 backend: str = "auto", rotary: Rotation | None = None) -> None:
        super().__init__(head_dim, causal, output_norm, backend=backend, rotary=rotary)

    def recurrence(self, q: Tensor, k: Tensor, v: Tensor, x: Tensor | None) -> Recurrence:
        batch, heads, length, _ = q.shape
        log_decay = retnet_log_decay(heads, q.dtype, q.device)
        return Recurrence(q, k, v, log_decay[None, :, None].expand(batch, heads, length), None,
                          None)
