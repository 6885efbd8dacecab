"""Feature maps phi of the linear attention variants.

Each map takes x of shape (batch, heads, n, head_dim) in float32 or float64 and returns
(phi, log_scale): phi of shape (batch, heads, n, num_features) and either None or a per-token
log-scale of shape (batch, heads, n). When log_scale is given, the true feature vector is
phi * exp(log_scale); keeping the scale apart lets the attention kernels apply an exact,
causal-safe stabiliser (a running maximum) instead of exponentiating large numbers. Stabilisers
are detached: the output does not depend on them, so neither does its gradient.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.buffers import write_into

FeatureOutput = tuple[Tensor, Tensor | None]


def _batched(matrix: Tensor, like: Tensor) -> Tensor:
    """matrix (r, c) expanded to (batch, heads, r, c) like `like`: matmul then writes straight
    into a (possibly strided) `out=` chunk instead of flattening it and failing or copying."""
    return matrix.expand(*like.shape[:2], *matrix.shape)


def elu_features(x: Tensor, out: Tensor | None = None) -> FeatureOutput:
    """Katharopoulos et al. (2020): phi(x) = elu(x) + 1 on the raw (unscaled) vector.

    out: a buffer shaped like x to compute phi in (no autograd graph then), or None.
    """
    phi = F.elu(x) if out is None else F.elu_(out.copy_(x))
    return phi.add_(1.0), None  # in place: elu saves its input, not its output


def elu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    out: Tensor,
) -> None:
    """Backward of elu_features from its output alone: d phi / d x is 1 where x > 0 (phi > 1)
    and exp(x) = phi where x <= 0, i.e. min(phi, 1). Writes grad_phi * min(phi, 1) into `out`
    (overwriting phi): one pass, no autograd graph, no copy."""
    write_into(out, torch.mul, grad_phi, phi.clamp_(max=1.0))


def performer_softmax_features(
    x: Tensor, projection: Tensor, is_query: bool, out: Tensor | None = None
) -> FeatureOutput:
    """FAVOR+ positive random features (Choromanski et al. 2021).

    phi(x) = exp(W x' - |x'|^2 / 2) with x' = x d^(-1/4), so that E[phi(q) . phi(k)] =
    exp(q . k / sqrt(d)). Factors shared by all features of one token are kept out of phi:
    for a query they cancel between numerator and denominator (so exp(-|q'|^2 / 2) and the
    paper's m^(-1/2) are dropped); for a key they are returned as its log_scale,
    max_i (W k')_i - |k'|^2 / 2, which the kernel applies relative to a maximum over the keys
    each query may see. Every exp() therefore has a non-positive argument.

    Args:
        x: (batch, heads, n, d).
        projection: (m, d), rows omega_i.
        is_query: queries return no log_scale.
        out: (batch, heads, n, m) buffer to write phi into, or None to allocate it.
    """
    scale = x.shape[-1] ** -0.25
    weights = _batched(projection.t() * scale, x)  # (batch, heads, d, m)
    logits = torch.matmul(x, weights) if out is None else write_into(out, torch.matmul, x, weights)
    row_max = logits.amax(dim=-1, keepdim=True).detach()
    phi = logits.sub_(row_max).exp_()  # in place: two passes over the largest tensor, not four
    if is_query:
        return phi, None
    return phi, row_max.squeeze(-1) - 0.5 * scale**2 * (x * x).sum(dim=-1)


def performer_softmax_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    out: Tensor, projection: Tensor,
) -> None:
    """Backward of performer_softmax_features, written into `out` (overwriting grad_phi).

    phi = exp(x W'^T - c) with W' = projection * d^(-1/4), so d loss / d x = (grad_phi * phi) W';
    a key's log_scale c - d^(-1/2) |x|^2 / 2 adds -d^(-1/2) x grad_log_scale. The row maximum
    c is a stabiliser taken as a constant in both, as in the forward pass.
    """
    scale = x.shape[-1] ** -0.25
    write_into(out, torch.matmul, grad_phi.mul_(phi), _batched(projection.to(x.dtype) * scale, x))
    if grad_log_scale is not None:
        out.addcmul_(x, grad_log_scale[..., None], value=-(scale**2))


RELU_FEATURE_FLOOR = 1e-3  # Performer's "generalized attention" adds it to every feature


def performer_relu_features(
    x: Tensor, projection: Tensor, out: Tensor | None = None
) -> FeatureOutput:
    """Performer's "generalized attention": phi(x) = relu(W x') + 1e-3, x' = x d^(-1/4).

    x: (batch, heads, n, d); projection: (m, d); out: (batch, heads, n, m) buffer or None.
    """
    weights = _batched(projection.t() * x.shape[-1] ** -0.25, x)
    if out is None:
        return F.relu(torch.matmul(x, weights)) + RELU_FEATURE_FLOOR, None
    return write_into(out, torch.matmul, x, weights).relu_().add_(RELU_FEATURE_FLOOR), None


def performer_relu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    out: Tensor, projection: Tensor,
) -> None:
    """Backward of performer_relu_features, written into `out` (overwriting grad_phi):
    d loss / d x = (grad_phi * [W x' > 0]) W'. W x' > 0 is read off phi > floor, which differs
    only for logits too small (about 1e-10 in float32) to change the floor."""
    weights = _batched(projection.to(x.dtype) * x.shape[-1] ** -0.25, x)
    write_into(out, torch.matmul, grad_phi.mul_(phi > RELU_FEATURE_FLOOR), weights)


def _cosformer_angles(positions: Tensor, scale_length: Tensor, dtype: torch.dtype) -> Tensor:
    """theta_i = pi/2 * i / M of positions (n,) for each sequence's M (batch,): (batch, 1, n, 1)."""
    theta = (math.pi / 2) * positions.to(dtype)[None, :] / scale_length.to(dtype)[:, None]
    return theta[:, None, :, None]


def cosformer_features(
    x: Tensor, positions: Tensor, scale_length: Tensor, out: Tensor | None = None
) -> FeatureOutput:
    """cosFormer (Qin et al. 2022): relu features reweighted by cos(pi/2 * (i - j) / M).

    cos(a - b) = cos a cos b + sin a sin b, so the weight factorises into 2 * head_dim features
    [relu(x_i) cos(theta_i), relu(x_i) sin(theta_i)] with theta_i = pi/2 * i / M.

    Args:
        x: (batch, heads, n, d).
        positions: (n,) absolute token positions.
        scale_length: (batch,) M for each sequence; M must exceed every position for the
            weight to stay positive.
        out: (batch, heads, n, 2 d) buffer to write phi into, or None to allocate it.
    """
    theta = _cosformer_angles(positions, scale_length, x.dtype)
    relu_x = F.relu(x)
    if out is None:
        return torch.cat([relu_x * torch.cos(theta), relu_x * torch.sin(theta)], dim=-1), None
    d = x.shape[-1]
    write_into(out[..., :d], torch.mul, relu_x, torch.cos(theta))
    write_into(out[..., d:], torch.mul, relu_x, torch.sin(theta))
    return out, None


def cosformer_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    out: Tensor, scale_length: Tensor,
) -> None:
    """Backward of cosformer_features, written into `out`:
    d loss / d x = (grad_cos * cos(theta) + grad_sin * sin(theta)) * [x > 0]."""
    theta = _cosformer_angles(positions, scale_length, x.dtype)
    d = x.shape[-1]
    write_into(out, torch.mul, grad_phi[..., :d], torch.cos(theta))
    out.addcmul_(grad_phi[..., d:], torch.sin(theta)).mul_(x > 0)


def orthogonal_gaussian_projection(
    num_features: int, head_dim: int, generator: torch.Generator
) -> Tensor:
    """Rows omega_i for FAVOR+: orthogonal blocks, each row rescaled to a chi-distributed norm.

    Each block is the Q of a QR decomposition of a head_dim x head_dim Gaussian matrix; there
    are num_features // head_dim full blocks and one partial block. Every row is then rescaled
    by the norm of an independent head_dim-dimensional Gaussian vector, so rows are marginally
    Gaussian (unbiased estimator) while being exactly orthogonal within a block (lower variance).

    Returns (num_features, head_dim) float32 on CPU.
    """
    blocks = []
    for start in range(0, num_features, head_dim):
        gaussian = torch.randn(head_dim, head_dim, generator=generator, dtype=torch.float64)
        q, _ = torch.linalg.qr(gaussian)
        blocks.append(q.t()[: min(head_dim, num_features - start)])
    rows = torch.cat(blocks, dim=0)
    norms = torch.randn(num_features, head_dim, generator=generator, dtype=torch.float64).norm(
        dim=1, keepdim=True
    )
    return (rows * norms).float()
