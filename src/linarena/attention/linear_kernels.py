"""The shared linear-attention algorithm, for any feature map phi: notation, key weights,
the chunked causal form and the recurrent step (the bidirectional form is in
bidirectional_kernel.py).

out_i = phi(q_i) S / (phi(q_i) . z + eps),  S = sum_j w_j phi(k_j) v_j^T,  z = sum_j w_j phi(k_j),
with j over all keys (bidirectional) or keys j <= i (causal). The key weight w_j is 0 for a
padded key, and exp(log_scale_j - top) when the feature map returns a log-scale (see
feature_maps.py), where `top` is a maximum over the keys the query may see. Weights multiply
v (d_v wide) instead of phi(k) (m wide, 4x wider for Performer).

Everything here runs in the dtype it is given (float32 or float64): the callers upcast, so the
state S and the normaliser z never accumulate in half precision. Stabilisers (`top`, running
maxima) are detached: the output does not depend on them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

# (x, positions, is_query, out=None) -> (phi, log_scale): see LinearAttention.feature_map.
FeatureFn = Callable[..., tuple[Tensor, Tensor | None]]
# Optional analytic backward of a feature map, (x, positions, phi, grad_phi, grad_log_scale,
# out): writes d loss / d x into `out` and may overwrite phi and grad_phi; grad_log_scale is
# None for queries and for maps without log-scale. Without one, the bidirectional kernel
# differentiates through a recomputation of the map with autograd (which torch.compile cannot
# trace in a single graph: the built-in maps all have one).
FeatureVjp = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor | None, Tensor], None]


def _lowest(dtype: torch.dtype) -> float:
    # A finite "minus infinity": exp() of it is 0 and differences of two of them are 0, not NaN.
    return torch.finfo(dtype).min


def masked_log_scale(log_scale: Tensor, mask: Tensor | None) -> Tensor:
    """Padded keys get the lowest log-scale: weight 0, and they never win a maximum."""
    if mask is None:
        return log_scale
    return log_scale.masked_fill(~mask[:, None, :], _lowest(log_scale.dtype))


def plain_weights(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Key weights (batch, 1, n) of a map without log-scale: the padding mask, or None."""
    return None if mask is None else mask[:, None, :].to(dtype)


def _weighted(x: Tensor, weights: Tensor | None) -> Tensor:
    return x if weights is None else x * weights[..., None]


def _weight_sum(phi: Tensor, weights: Tensor | None) -> Tensor:
    """sum_j w_j phi_j over dim -2: (batch, heads, m)."""
    if weights is None:
        return phi.sum(dim=-2)
    return (weights.unsqueeze(-2).expand(*phi.shape[:2], 1, -1) @ phi).squeeze(-2)


def causal_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, features: FeatureFn,
    eps: float, chunk_size: int,
) -> Tensor:
    """Causal linear attention by chunks: exact quadratic attention inside each chunk of C tokens,
    plus the carried state (S, z) of all earlier chunks. Memory is O(n C + (n / C) m d_v) for
    autograd, never a per-token m x d_v state.

    Shapes as in bidirectional_linear_attention.
    """
    positions = torch.arange(q.shape[2], device=q.device)
    causal_mask = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    # split(), not slicing in a loop: each slice's backward would allocate a full-length gradient.
    chunks = [x.split(chunk_size, dim=2) for x in (q, k, v)]
    mask_chunks = [None] * len(chunks[0]) if mask is None else mask.split(chunk_size, dim=1)
    state = None
    outs = []
    for q_c, k_c, v_c, mask_c, pos in zip(
        *chunks, mask_chunks, positions.split(chunk_size), strict=True
    ):
        tril = causal_mask[: q_c.shape[2], : q_c.shape[2]]
        phi_q, _ = features(q_c, pos, True)
        phi_k, log_scale = features(k_c, pos, False)
        if state is None:
            state = LinearAttentionState.zeros(q, phi_q.shape[-1], v.shape[-1])
        scores = phi_q @ phi_k.transpose(-1, -2)  # (b, h, c, c)
        if log_scale is None:
            allowed = tril if mask_c is None else tril & mask_c[:, None, None, :]
            scores = scores * allowed
            past = 1.0
        else:
            # Running maximum over keys <= i: the stabiliser of query i sees no later key.
            log_scale = masked_log_scale(log_scale, mask_c)
            running = torch.cummax(log_scale.detach(), dim=-1).values
            running = torch.maximum(running, state.top[..., None])
            gap = (log_scale[..., None, :] - running[..., :, None]).masked_fill(~tril, -torch.inf)
            scores = scores * torch.exp(gap)
            past = torch.exp(state.top[..., None] - running)[..., None]  # (b, h, c, 1)
        num = scores @ v_c + (phi_q @ state.kv) * past
        den = scores.sum(dim=-1, keepdim=True) + (phi_q @ state.z.unsqueeze(-1)) * past
        outs.append(num / (den + eps))
        state = state.absorb(phi_k, log_scale, v_c, mask_c)
    return torch.cat(outs, dim=2)


@dataclass
class LinearAttentionState:
    """The recurrent state of causal linear attention after `position` tokens.

    kv: (batch, heads, m, d_v), sum of w_j phi(k_j) v_j^T; z: (batch, heads, m), sum of
    w_j phi(k_j); top: (batch, heads), the running maximum log-scale the weights are relative
    to (the lowest float when the feature map has no log-scale).
    """

    kv: Tensor
    z: Tensor
    top: Tensor
    position: int

    @classmethod
    def zeros(cls, like: Tensor, num_features: int, value_dim: int) -> LinearAttentionState:
        """A state before any token, for a batch shaped like `like` (batch, heads, ...)."""
        batch, heads = like.shape[:2]
        kv = like.new_zeros(batch, heads, num_features, value_dim)
        z = like.new_zeros(batch, heads, num_features)
        top = like.new_full((batch, heads), _lowest(like.dtype))
        return cls(kv, z, top, 0)

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
        return LinearAttentionState(kv, z, top, self.position + phi_k.shape[2])


def recurrent_step(
    q: Tensor, k: Tensor, v: Tensor, state: LinearAttentionState | None,
    features: FeatureFn, eps: float,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention (the RNN view): O(1) work per token.

    q, k: (batch, heads, d); v: (batch, heads, d_v); state None before the first token.
    Returns the output (batch, heads, d_v) and the state after this token.
    """
    position = torch.tensor([0 if state is None else state.position], device=q.device)
    phi_q, _ = features(q[:, :, None], position, True)
    phi_k, log_scale = features(k[:, :, None], position, False)
    if state is None:
        state = LinearAttentionState.zeros(q, phi_q.shape[-1], v.shape[-1])
    state = state.absorb(phi_k, log_scale, v[:, :, None])
    num = phi_q @ state.kv  # (b, h, 1, d_v)
    den = phi_q @ state.z.unsqueeze(-1)
    return (num / (den + eps))[:, :, 0], state
