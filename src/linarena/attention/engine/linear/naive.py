"""Plain quadratic attention in float64, the ground truth the feature-map kernels (chunk.py,
bidirectional.py, step.py) and softmax are checked against: softmax, ELU+1, Performer (FAVOR+)
and cosFormer weights, masked and normalised.

Deliberately written from the papers' formulas, sharing no code with linarena.attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def allowed_pairs(mask: Tensor | None, batch: int, length: int, causal: bool) -> Tensor:
    """(batch, 1, length, length) bool: may query i use key j."""
    allowed = torch.ones(batch, 1, length, length, dtype=torch.bool)
    if mask is not None:
        allowed &= mask[:, None, None, :]
    if causal:
        allowed &= torch.ones(length, length, dtype=torch.bool).tril()
    return allowed


def softmax_reference(q, k, v, mask=None, causal=False) -> Tensor:
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed_pairs(mask, q.shape[0], q.shape[2], causal), -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def _kernel_attention(weights: Tensor, v: Tensor, allowed: Tensor, eps: float) -> Tensor:
    weights = weights * allowed
    return weights @ v / (weights.sum(-1, keepdim=True) + eps)


def elu_reference(q, k, v, mask=None, causal=False, eps=1e-6) -> Tensor:
    q, k, v = q.double(), k.double(), v.double()
    weights = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)
    return _kernel_attention(weights, v, allowed_pairs(mask, q.shape[0], q.shape[2], causal), eps)


def performer_reference(q, k, v, projection, kernel="softmax", mask=None, causal=False,
                        eps=0.0) -> Tensor:
    """FAVOR+ with the given projection rows, unstabilised, eps added to its normaliser."""
    q, k, v, w = q.double(), k.double(), v.double(), projection.double()
    scale = q.shape[-1] ** -0.25

    def phi(x):
        x = x * scale
        if kernel == "relu":
            return F.relu(x @ w.t()) + 1e-3
        return torch.exp(x @ w.t() - (x * x).sum(-1, keepdim=True) / 2) / math.sqrt(w.shape[0])

    weights = phi(q) @ phi(k).transpose(-1, -2)
    return _kernel_attention(weights, v, allowed_pairs(mask, q.shape[0], q.shape[2], causal), eps)


def cosformer_reference(q, k, v, mask=None, causal=False, max_length=None, eps=1e-6) -> Tensor:
    q, k, v = q.double(), k.double(), v.double()
    batch, _, length, _ = q.shape
    if causal:
        m = torch.full((batch,), float(max_length), dtype=torch.float64)
    elif mask is None:
        m = torch.full((batch,), float(length), dtype=torch.float64)
    else:
        m = mask.sum(-1).double()
    i = torch.arange(length, dtype=torch.float64)
    distance = i[:, None] - i[None, :]  # (length, length)
    reweight = torch.cos(math.pi / 2 * distance[None] / m[:, None, None])[:, None]
    weights = (F.relu(q) @ F.relu(k).transpose(-1, -2)) * reweight
    return _kernel_attention(weights, v, allowed_pairs(mask, batch, length, causal), eps)
