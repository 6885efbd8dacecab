"""The float64 references every attention variant is checked against, and the modules and
inputs the checks build: the generic tests (tests/helpers/attention.py re-exports these) and
the arena's certificate (certificate.py) use the same ones, so the two cannot drift.

- quadratic_reference: plain quadratic attention in float64 (softmax for an exact core; for a
  LinearAttention weights phi(q_i) . phi(k_j) from its map's own features), or the
  token-by-token recurrence for a RecurrentAttention;
- layer_reference: a whole layer's own parts (its projections, gates, norms) around the
  token-by-token recurrence instead of the chunked engine;
- float64_tolerance: how far two float64 computations of one sum may differ by rounding.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

from linarena.attention import LinearAttention
from linarena.attention.engine.gated.naive import recurrence
from linarena.attention.engine.linear.naive import allowed_pairs
from linarena.attention.layers import AttentionLayer, build_attention
from linarena.attention.layers.base import LayerCall
from linarena.attention.recurrent import RecurrentAttention
from linarena.attention.variants import CONF_DIR, load_variant

HEAD_DIM = 16
HEADS = 3
LAYER_WIDTH, LAYER_HEADS = 32, 2
# Unit roundoff of float64 (2^-53).
UNIT_ROUNDOFF_64 = torch.finfo(torch.float64).eps / 2


def build(name: str, causal: bool, head_dim: int = HEAD_DIM, max_length: int = 64,
          chunk_size: int | None = 8, seed: int = 0, heads: int = HEADS,
          rotary: nn.Module | None = None, conf_dir: Path = CONF_DIR) -> nn.Module:
    """The core `attention=<name>` builds in training, with small causal chunks (so short
    inputs span several) and the global seed set (Performer's seedless draw, learned maps).
    A core that reads the token comes wrapped in TokenFromQ (model width heads * head_dim).
    `rotary`: relative positions, passed as the model passes them (model.positions=rope)."""
    factory = load_variant(name, {"max_length": max_length, "num_heads": heads,
                                  "d_model": heads * head_dim}, conf_dir)
    torch.manual_seed(seed)
    chunks = {"chunk_size": chunk_size} if chunk_size and issubclass(
        factory.func, LinearAttention) else {}
    positions = {} if rotary is None else {"rotary": rotary}
    attn = factory(head_dim=head_dim, causal=causal, **chunks, **positions)
    return TokenFromQ(attn) if getattr(attn, "reads_token", False) else attn


def build_layer(name: str, causal: bool, d_model: int = LAYER_WIDTH, num_heads: int = LAYER_HEADS,
                seed: int = 0, rotary: nn.Module | None = None,
                conf_dir: Path = CONF_DIR) -> nn.Module:
    """The layer `attention=<name>` builds in a model of this width and heads (the global seed
    set first), as linarena.attention.layers.build_attention builds it."""
    factory = load_variant(name, {"max_length": 64, "num_heads": num_heads, "d_model": d_model},
                           conf_dir)
    torch.manual_seed(seed)
    return build_attention(factory, d_model // num_heads, causal, rotary)


def core(attn: nn.Module) -> nn.Module:
    """The attention module itself, out of a TokenFromQ."""
    return attn.core if isinstance(attn, TokenFromQ) else attn


class TokenFromQ(nn.Module):
    """A core that reads the token (gates, beta), called as every other: its token x is q with
    the heads side by side (batch, length, heads * head_dim), so gates and beta vary with the
    input, padding junk included, and gradients reach them."""

    def __init__(self, core: nn.Module) -> None:
        super().__init__()
        self.core = core
        self.causal = core.causal

    @staticmethod
    def token(q: Tensor) -> Tensor:
        return q.transpose(1, 2).flatten(2) if q.dim() == 4 else q

    def forward(self, q, k, v, mask=None, **state_options):
        return self.core(q, k, v, mask, x=self.token(q), **state_options)

    def step(self, q, k, v, state=None):
        return self.core.step(q, k, v, state, x=q.flatten(1) if q.dim() == 3 else q)

    def reference(self, q, k, v, mask=None):
        """The float64 token-by-token recurrence on the core's own inputs (its gates, beta, q/k
        transforms) and its output normalisation; padded tokens are left out of the state."""
        r = self.core.recurrence_inputs(q, k, v, self.token(q))
        return recurrence_reference(self.core, r, mask)


def inputs(batch=2, heads=3, length=37, dtype=torch.float64, seed=0, scale=1.0,
           head_dim=HEAD_DIM) -> list[Tensor]:
    """q, k, v of shape (batch, heads, length, head_dim)."""
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(batch, heads, length, head_dim, generator=g, dtype=dtype)
            for _ in range(3)]


def padding_mask(lengths: list[int], length: int) -> Tensor:
    """bool (batch, length), True for the first lengths[b] tokens (right padding)."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


def float64_tolerance(expected: Tensor, terms: int) -> float:
    """The absolute difference two float64 computations of `expected` may show by rounding.

    Each element is a sum of at most `terms` products (attention: length x features, through
    two matrix products). A computed sum of n products x_i y_i is within n u sum|x_i y_i| of the
    exact value (u = 2^-53; Higham, Accuracy and Stability of Numerical Algorithms, sec. 3.1),
    wherever the BLAS puts its partial sums: blocking, vector width and thread count move a
    result inside that interval, so two results differ by at most twice that. sum|x_i y_i| is
    bounded here, normwise, by the largest magnitude in `expected` (the terms are of the order of
    the tensor's entries); a factor 16 covers the few operations around the sums (normaliser,
    division, chunk-state updates). An implementation error is orders of magnitude larger.
    """
    scale = expected.abs().max().item() if expected.numel() else 0.0
    return 2 * 16 * terms * UNIT_ROUNDOFF_64 * max(scale, 1.0)


def features(attn: nn.Module, head_dim: int) -> int:
    """The width of one token's contribution to a state: a feature map's features, else
    head_dim + 1 (a recurrence's key, plus a denominator column)."""
    attn = core(attn)
    if hasattr(attn, "feature_map"):
        return attn.feature_map.num_features(head_dim)
    return head_dim + 1


def quadratic_reference(attn: nn.Module, q, k, v, mask=None) -> Tensor:
    """Plain quadratic attention in float64: softmax for an exact module; for a
    LinearAttention, weights phi(q_i) . phi(k_j) with phi from its map's own features (true
    features: phi * exp(log_scale) for queries and keys, no stabiliser), normalised with the
    module's eps, then its output_norm."""
    q, k, v = q.double(), k.double(), v.double()
    if isinstance(attn, TokenFromQ):
        return attn.reference(q, k, v, mask)
    if isinstance(attn, RecurrentAttention):
        return recurrence_reference(attn, attn.recurrence_inputs(q, k, v, None), mask)
    batch, _, length, _ = q.shape
    allowed = allowed_pairs(mask, batch, length, attn.causal)
    window = getattr(attn, "window", None)
    if window is not None:  # sliding-window attention: keys with |i - j| < window only
        i = torch.arange(length)
        allowed = allowed & ((i[:, None] - i[None, :]).abs() < window)
    if not isinstance(attn, LinearAttention):
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~allowed, -math.inf)
        return torch.softmax(scores, dim=-1) @ v
    feature_map, positions = attn.feature_map, torch.arange(length)
    context = feature_map.context(mask, batch, length, q.device)
    phi_q, query_log_scale = feature_map.features(q, positions, context, True)
    phi_k, log_scale = feature_map.features(k, positions, context, False)
    if query_log_scale is not None:
        phi_q = phi_q * torch.exp(query_log_scale)[..., None]
    if log_scale is not None:
        phi_k = phi_k * torch.exp(log_scale)[..., None]
    weights = (phi_q @ phi_k.transpose(-1, -2)) * allowed
    return attn.output_norm(weights @ v / (weights.sum(-1, keepdim=True) + attn.eps))


def recurrence_reference(attn: RecurrentAttention, r, mask=None) -> Tensor:
    """engine/gated/naive.py's recurrence on r (a Recurrence), then attn's output(): each
    sequence on its own, cut to its real tokens (so padding never enters the state)."""
    batch, _, length, _ = r.q.shape
    lengths = [length] * batch if mask is None else mask.sum(-1).tolist()
    out = torch.zeros(*r.q.shape[:3], r.v.shape[-1], dtype=torch.float64)
    for b, n in enumerate(lengths):
        part = [None if t is None else t[b:b + 1, :, :n] for t in (r.q, r.k, r.v, r.log_gate,
                                                                   r.beta)]
        out[b:b + 1, :, :n] = recurrence(*part, causal=attn.causal, scale=r.scale)[0]
    return attn.output(out)


def has_reference(layer: AttentionLayer) -> bool:
    """Whether layer_reference applies: the layer runs the base's mix (one declared recurrence
    on its parts); a layer of other parts (Based's kernel sums and window) has none here."""
    return type(layer).mix is AttentionLayer.mix


def layer_reference(layer: AttentionLayer, x: Tensor) -> Tensor:
    """The layer on float64 x (batch, n, d_model), no padding, with its recurrence computed
    token by token (engine/gated/naive.py: the gated update or the delta rule) on the parts
    its own project() gives, then its own output()."""
    call = LayerCall(layer, x, None, None, False)
    parts = layer.project(x, call)
    beta = parts.get("beta") if layer.recurrence == "delta" else None
    o, _ = recurrence(parts["q"], parts["k"], parts["v"], parts.get("log_gate"), beta,
                      causal=layer.causal, scale=parts.get("scale"))
    return layer.output(o.to(call.dtype), parts, call)
