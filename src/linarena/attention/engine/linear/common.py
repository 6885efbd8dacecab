"""What the feature-map kernels (bidirectional.py, chunk.py, step.py) share: notation, key
weights, eps and the state:

out_i = phi(q_i) S / (phi(q_i) . z + eps),  S = sum_j w_j phi(k_j) v_j^T,  z = sum_j w_j phi(k_j),
with j over all keys (bidirectional) or keys j <= i (causal). The kernels take the features,
computed once by LinearAttention: phi_q, phi_k (batch, heads, n, m) and their optional
log-scales (batch, heads, n) (see FeatureMap.features). The key weight w_j is 0 for a padded key,
and exp(log_scale_j - top) when keys have a log-scale, where `top` is a maximum over the keys the
query may see. Weights multiply v (d_v wide) instead of phi(k) (m wide, 4x wider for Performer).
eps is added to the true denominator, whatever the stabilisers (see eps_term).

Everything here runs in the dtype it is given (float32 or float64): LinearAttention upcasts, so
the state S and the normaliser z never accumulate in half precision. Stabilisers (`top`,
running maxima) are detached: the output does not depend on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from linarena.attention.engine.common import lowest


def masked_log_scale(log_scale: Tensor, mask: Tensor | None) -> Tensor:
    """Padded keys get the lowest log-scale: weight 0, and they never win a maximum."""
    if mask is None:
        return log_scale
    return log_scale.masked_fill(~mask[:, None, :], lowest(log_scale.dtype))


def plain_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Key weights (batch, 1, n) of keys without log-scale: the padding mask, or None."""
    return None if mask is None else mask[:, None, :].to(dtype)


# Largest exponent eps_term uses: exp() of it stays finite with room for the sums around it.
EPS_EXPONENT_CAP = {dtype: math.log(torch.finfo(dtype).max) - 8
                    for dtype in (torch.float32, torch.float64)}


def eps_term(
    eps: float, query_log_scale: Tensor | None, top: Tensor | None, like: Tensor
) -> Tensor | float:
    """eps in the stabilised frame, so that it lands on the true denominator.

    The kernels compute the denominator of query i as true_den_i * exp(-(lq_i + top_i)) (lq: the
    query's log-scale, top: the key stabiliser it sees), so the true `true_den + eps` needs
    eps * exp(-(lq_i + top_i)) here. Shapes: query_log_scale (batch, heads, c) or None, top
    (batch, heads, c) or None (no key log-scale); returns a float or (batch, heads, c). The
    exponent is capped below overflow: there eps dwarfs any denominator the features can make,
    and the output is 0 as it should be, with finite gradients.
    """
    if eps == 0 or (query_log_scale is None and top is None):
        return eps
    exponent = math.log(eps) - (0.0 if query_log_scale is None else query_log_scale)
    exponent = exponent - (0.0 if top is None else top)
    return torch.exp(exponent.clamp(max=EPS_EXPONENT_CAP[like.dtype]))


def eps_slope(eps_t: Tensor | float, query_log_scale: Tensor | None, like: Tensor) -> Tensor | None:
    """d eps_t / d query_log_scale for eps_term's value eps_t: -eps_t, and 0 where eps_term capped
    the exponent; None where eps_t does not depend on a query log-scale."""
    if query_log_scale is None or not isinstance(eps_t, Tensor):
        return None
    return torch.where(eps_t < 0.5 * math.exp(EPS_EXPONENT_CAP[like.dtype]), -eps_t, 0.0)


def add_product(total: Tensor | None, a: Tensor, b: Tensor) -> Tensor:
    """total + a @ b for (batch, heads, r, s) @ (batch, heads, s, t): a @ b when total is None,
    else accumulated into `total` in place (one BLAS call, no temporary)."""
    if total is None:
        return a @ b
    total.view(-1, *total.shape[-2:]).baddbmm_(a.reshape(-1, *a.shape[-2:]),
                                               b.reshape(-1, *b.shape[-2:]))
    return total


def normalised(num: Tensor, den: Tensor, eps: Tensor | float) -> Tensor:
    """num / (den + eps) for num (..., c, d_v), den (..., c, 1) and eps_term's value (a float or
    (..., c)). A row whose denominator is exactly 0 (every term vanished: a fully padded row, an
    underflow) has num = 0 too and gets 0, not NaN, so eps = 0 is safe."""
    den = den + (eps[..., None] if isinstance(eps, Tensor) else eps)
    return num / torch.where(den == 0, 1.0, den)


def _weighted(x: Tensor, weights: Tensor | None) -> Tensor:
    """x (batch, heads, c, .) times the weights (batch, heads or 1, c), or x for None."""
    return x if weights is None else x * weights[..., None]


def _weight_sum(phi: Tensor, weights: Tensor | None) -> Tensor:
    """sum_j w_j phi_j over dim -2: (batch, heads, m)."""
    if weights is None:
        return phi.sum(dim=-2)
    return (weights.unsqueeze(-2).expand(*phi.shape[:2], 1, -1) @ phi).squeeze(-2)


@dataclass
class LinearAttentionState:
    """The recurrent state of causal linear attention after `position` tokens.

    kv: (batch, heads, m, d_v), sum of w_j phi(k_j) v_j^T; z: (batch, heads, m), sum of
    w_j phi(k_j); top: (batch, heads), the running maximum log-scale the weights are relative
    to (the lowest float when the feature map has no log-scale); feature_map: the
    FeatureMap.state_key() of the map that made it, with its head_dim.
    """

    kv: Tensor
    z: Tensor
    top: Tensor
    position: int
    feature_map: str = ""

    @classmethod
    def zeros(
        cls, like: Tensor, num_features: int, value_dim: int, feature_map: str = ""
    ) -> LinearAttentionState:
        """A state before any token, for a batch shaped like `like` (batch, heads, ...)."""
        batch, heads = like.shape[:2]
        kv = like.new_zeros(batch, heads, num_features, value_dim)
        z = like.new_zeros(batch, heads, num_features)
        top = like.new_full((batch, heads), lowest(like.dtype))
        return cls(kv, z, top, 0, feature_map)

    def absorb(
        self, phi_k: Tensor, log_scale: Tensor | None, v: Tensor, mask: Tensor | None = None
    ) -> LinearAttentionState:
        """Add keys phi_k (batch, heads, c, m), values v (batch, heads, c, d_v), mask (batch, c)."""
        kv, z, top = self.kv, self.z, self.top
        if log_scale is None:
            weights = plain_weights(mask, phi_k.dtype)
        else:
            log_scale = masked_log_scale(log_scale, mask)
            new_top = torch.maximum(top, log_scale.detach().amax(dim=-1))
            decay = torch.exp(top - new_top)
            kv, z, top = kv * decay[..., None, None], z * decay[..., None], new_top
            weights = torch.exp(log_scale - top[..., None])
        kv = kv + phi_k.transpose(-1, -2) @ _weighted(v, weights)
        z = z + _weight_sum(phi_k, weights)
        return LinearAttentionState(kv, z, top, self.position + phi_k.shape[2], self.feature_map)
