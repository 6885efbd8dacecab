"""cosFormer features (Qin et al. 2022): relu features re-weighted by cos(pi/2 * (i - j) / M)."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.buffers import write_into
from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp


class CosformerFeatures(FeatureMap):
    """Weight relu(q_i) . relu(k_j) * cos(pi/2 * (i - j) / M), as 2 * head_dim features.

    cos(a - b) = cos a cos b + sin a sin b, so the weight factorises into the features
    [relu(x_i) cos(theta_i), relu(x_i) sin(theta_i)] with theta_i = pi/2 * i / M.
    Bidirectional: M is each sequence's real extent (its last real position + 1: its length
    under right padding), so padding never changes a real token's output and, with holes in the
    mask (black pixels as padding), every weight stays positive. Causal: M = max_length, fixed, so
    that no output depends on how long the sequence will become; longer inputs are an error.

    Args:
        max_length: M in causal mode (required there); ignored when bidirectional.
    """

    def __init__(self, max_length: int | None = None) -> None:
        super().__init__()
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be positive, got {max_length}.")
        self.max_length = max_length
        self.causal = False

    def num_features(self, head_dim: int) -> int:
        return 2 * head_dim

    def setup(self, head_dim: int, causal: bool) -> None:
        if causal and self.max_length is None:
            raise ValueError(
                "cosFormer with causal=True needs max_length: in causal mode the weight "
                "cos(pi/2 * (i - j) / M) uses M = max_length so it cannot depend on future "
                "tokens. Pass max_length (in configs: attention.max_length, which defaults to "
                "${model.max_length})."
            )
        self.causal = causal

    def context(self, mask: Tensor | None, batch: int, length: int, device) -> Tensor:
        """M for each sequence, shape (batch,)."""
        if self.causal:
            return torch.full((batch,), self.max_length, device=device)
        if mask is None:
            return torch.full((batch,), length, device=device)
        # M = last real position + 1: the real length under right padding, and beyond every
        # distance between real tokens under any mask (holes), so the weight stays positive.
        # A fully padded row gets M = length (finite, unused).
        return length - mask.flip(-1).int().argmax(dim=-1)

    def check_length(self, length: int) -> None:
        if self.causal and length > self.max_length:
            raise ValueError(
                f"cosFormer: sequence length {length} exceeds max_length={self.max_length}; in "
                "causal mode M = max_length must cover every position (the cos weight turns "
                "negative beyond it). Raise max_length (attention.max_length / "
                "model.max_length) or shorten the input."
            )

    writes_into = True

    def features(self, x: Tensor, positions: Tensor, context: Tensor, is_query: bool,
                 out: Tensor | None = None) -> FeatureOutput:
        """x: (batch, heads, n, d); positions: (n,); context: M (batch,); out: a buffer for phi
        or None. Returns phi (batch, heads, n, 2 d). M must exceed every position for the
        weight to stay positive."""
        cos, sin = _cos_sin(positions, context, x.dtype)
        if out is None:
            relu_x = F.relu(x)
            return torch.cat([relu_x * cos, relu_x * sin], dim=-1), None
        d = x.shape[-1]  # relu(x) into the first half, no temporary
        relu_x = write_into(out[..., :d], torch.clamp, x, 0.0)
        write_into(out[..., d:], torch.mul, relu_x, sin)
        relu_x.mul_(cos)
        return out, None

    def vjp(self, context: Tensor) -> FeatureVjp:
        return functools.partial(cosformer_features_vjp, scale_length=context)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}"


def cosformer_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    scale_length: Tensor,
) -> Tensor:
    """Backward of CosformerFeatures.features:
    d loss / d x = (grad_cos * cos(theta) + grad_sin * sin(theta)) * [x > 0], written over
    grad_cos (the result is a view of grad_phi's first half). [x > 0] is read off the cos
    features, relu(x) cos(theta) > 0 (cos > 0 at every real token), written over them."""
    cos, sin = _cos_sin(positions, scale_length, x.dtype)
    d = x.shape[-1]
    grad_x = grad_phi[..., :d].mul_(cos).addcmul_(grad_phi[..., d:], sin)
    return grad_x.mul_(phi[..., :d].gt_(0.0))


def _cos_sin(positions: Tensor, scale_length: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos(theta_i), sin(theta_i) with theta_i = pi/2 * i / M, for positions (n,) and each
    sequence's M (batch,): each (batch, 1, n, 1)."""
    theta = (math.pi / 2) * positions.to(dtype)[None, :] / scale_length.to(dtype)[:, None]
    theta = theta[:, None, :, None]
    return torch.cos(theta), torch.sin(theta)
