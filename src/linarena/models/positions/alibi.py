"""model.positions=alibi: a linear bias on the attention scores (Press et al. 2022)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from linarena.models.positions.base import Positions


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's slope m_h of each head h, in head order.

    heads a power of two: m_h = 2^(-8h / heads), h = 1 .. heads (the paper's geometric
    sequence: 1/2, 1/4, ..., 1/256 for 8 heads). Otherwise the rule of the paper's reference
    code (ofirpress/attention_with_linear_biases, get_slopes; fairseq's is the same): the slopes
    of the closest power of two p below, then every other slope of 2p (h = 1, 3, 5, ...) for
    the heads - p remaining heads, so that those interleave with the first p instead of
    repeating them.
    """
    if heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got {heads}.")
    power = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8 * h / power) for h in range(1, power + 1)]
    return slopes + [2.0 ** (-8 * h / (2 * power)) for h in range(1, 2 * power, 2)][
        : heads - power]


class AlibiPositions(Positions):
    """ALiBi (Press et al. 2022, "Train Short, Test Long"): head h adds -m_h * |i - j| to the
    score of query i and key j (alibi_slopes gives m_h), so that attention decays linearly with
    the distance, at a rate of its own per head; nothing is added to the embedding. Causal
    attention sees j <= i only, where the bias is -m_h * (i - j), as the paper writes it.

    The bias is computed in float32 (float64 for float64 scores) and cast to the scores' dtype:
    up to 8 heads the slopes are powers of two, so the float32 bias is exact up to 2^24
    positions.
    """

    name = "alibi"
    description = "a bias on the attention scores"

    biases = True

    def score_bias(self, queries: Tensor, keys: Tensor, heads: int, dtype: torch.dtype
                   ) -> Tensor:
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        slopes = torch.tensor(alibi_slopes(heads), dtype=wide, device=queries.device)
        distance = (queries[:, None] - keys[None, :]).abs().to(wide)  # (n_q, n_k)
        return (-slopes[:, None, None] * distance).to(dtype)

    def extra_repr(self) -> str:
        return "slopes 2^(-8h/heads)"
