"""Bidirectional linear attention on features (notation in common.py).

The keys are summarised in one augmented state S~ = sum_j phi(k_j) [w_j v_j, w_j]^T of shape
(m, d_v + 1): its first d_v columns are S and its last column is the normaliser z (the usual
"append a column of ones to v"). One matmul phi(q) S~ then gives numerator and denominator
together, and the backward pass (autograd) needs one matmul per gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.kernels.common import (
    eps_term,
    masked_log_scale,
    normalised,
    plain_weights,
)


def bidirectional(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, query_log_scale: Tensor | None,
    key_log_scale: Tensor | None, mask: Tensor | None, eps: float,
) -> Tensor:
    """Every query attends to every real key.

    phi_q, phi_k: (batch, heads, n, m); v: (batch, heads, n, d_v); log-scales (batch, heads, n)
    or None; mask: bool (batch, n) or None. Returns (batch, heads, n, d_v).
    """
    top = None
    if key_log_scale is None:
        weights = plain_weights(mask, v.dtype)
    else:
        log_scale = masked_log_scale(key_log_scale, mask)
        top = log_scale.detach().amax(dim=-1, keepdim=True)  # (b, h, 1)
        weights = torch.exp(log_scale - top)
    values = torch.cat([v, v.new_ones(*v.shape[:3], 1)], dim=-1)
    if weights is not None:
        values = values * weights[..., None]
    state = phi_k.transpose(-1, -2) @ values  # (b, h, m, d_v + 1) = [S | z]
    num_den = phi_q @ state
    return normalised(num_den[..., :-1], num_den[..., -1:], eps_term(eps, query_log_scale, top, v))
