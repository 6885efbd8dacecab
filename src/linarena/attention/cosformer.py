"""cosFormer attention (Qin et al. 2022): relu features with a cos re-weighting by distance."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from linarena.attention.feature_maps import (
    FeatureOutput,
    cosformer_features,
    cosformer_features_vjp,
)
from linarena.attention.linear import LinearAttention
from linarena.attention.linear_kernels import FeatureVjp


class CosformerAttention(LinearAttention):
    """Linear attention with weight relu(q_i) . relu(k_j) * cos(pi/2 * (i - j) / M).

    Bidirectional: M is each sequence's real extent (its last real position + 1: its length
    under right padding), so padding never changes a real token's output and, with holes in the
    mask, every weight stays positive. Causal: M = max_length, fixed, so that no
    output depends on how long the sequence will become; longer inputs are an error.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        max_length: M in causal mode (required there); ignored when bidirectional.
        eps, chunk_size: see LinearAttention.
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        max_length: int | None = None,
        eps: float = 1e-6,
        chunk_size: int = 64,
    ) -> None:
        super().__init__(head_dim, causal=causal, eps=eps, chunk_size=chunk_size)
        if causal and max_length is None:
            raise ValueError(
                "CosformerAttention(causal=True) needs max_length: in causal mode the weight "
                "cos(pi/2 * (i - j) / M) uses M = max_length so it cannot depend on future "
                "tokens. Pass max_length (in configs: attention.max_length, which defaults to "
                "${model.max_length})."
            )
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be positive, got {max_length}.")
        self.max_length = max_length

    def feature_map(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        return cosformer_features(x, positions, context, out)

    def feature_map_vjp(self, context: Any) -> FeatureVjp:
        return functools.partial(cosformer_features_vjp, scale_length=context)

    def feature_context(self, mask: Tensor | None, batch: int, length: int, device) -> Tensor:
        """M for each sequence, shape (batch,)."""
        if self.causal:
            return torch.full((batch,), self.max_length, device=device)
        if mask is None:
            return torch.full((batch,), length, device=device)
        # M = last real position + 1: the real length under right padding, and beyond every
        # distance between real tokens under any mask (holes, e.g. black pixels as padding), so
        # the weight stays positive. A fully padded row gets M = length (finite, unused).
        return length - mask.flip(-1).int().argmax(dim=-1)

    def check_length(self, length: int) -> None:
        if self.causal and length > self.max_length:
            raise ValueError(
                f"CosformerAttention: sequence length {length} exceeds max_length="
                f"{self.max_length}; in causal mode M = max_length must cover every position "
                "(the cos weight turns negative beyond it). Raise max_length (attention.max_length "
                "/ model.max_length) or shorten the input."
            )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_length={self.max_length}"
