"""How well Performer's FAVOR+ estimates softmax attention: mean |out - exact| against an
exact float64 softmax, for linarena and for performer-pytorch given the same projections.

Two kinds of input, because the yardstick matters:
  - "random": q, k, v i.i.d. Gaussian. The exact attention is then close to uniform, so
    anything that drifts towards the mean of v scores well, whether or not it estimates softmax.
  - "clustered": queries and keys lie around shared centres and each key's value is its
    cluster's, so each query's exact attention favours its own cluster (as trained attention
    favours relevant keys) and uniform attention is far off.
Two yardsticks come with them: performer-pytorch's estimator with its feature floor removed
(plain FAVOR+), and the mean of v (uniform attention).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention import PerformerAttention

INPUTS = ("random", "clustered")
PERFORMER_PYTORCH_EPS = 1e-4  # the feature floor FastAttention adds


def random_inputs(shape: tuple[int, ...], scale: float, generator: torch.Generator) -> tuple:
    """q, k of standard deviation `scale` and v standard normal, all i.i.d., of `shape`
    (batch, heads, n, d)."""
    q, k, v = (torch.randn(shape, generator=generator, device=generator.device) for _ in range(3))
    return scale * q, scale * k, v


def clustered_inputs(
    shape: tuple[int, ...], scale: float, generator: torch.Generator,
    clusters: int = 16, spread: float = 0.3,
) -> tuple[Tensor, Tensor, Tensor]:
    """q, k around `clusters` shared Gaussian centres (noise `spread`), scaled by `scale`;
    v (batch, heads, n, d) is a random vector per cluster, so the exact output of a query
    depends on how much attention it gives its own cluster."""
    batch, heads, n, d = shape
    device = generator.device

    def randn(*size: int) -> Tensor:
        return torch.randn(*size, generator=generator, device=device)

    centres = randn(batch, heads, clusters, d)
    key_cluster, query_cluster = (
        torch.randint(0, clusters, (n,), generator=generator, device=device) for _ in range(2)
    )
    k = scale * (centres[:, :, key_cluster] + spread * randn(*shape))
    q = scale * (centres[:, :, query_cluster] + spread * randn(*shape))
    v = randn(batch, heads, clusters, d)[:, :, key_cluster]
    return q, k, v


def performer_pytorch_fn(projection: Tensor, eps: float) -> Callable:
    """performer-pytorch's own FAVOR+ functions with a given projection and feature floor eps
    (its FastAttention uses eps=1e-4; eps=0 is the plain FAVOR+ estimator)."""
    from performer_pytorch.performer_pytorch import linear_attention, softmax_kernel

    def attend(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q_features = softmax_kernel(q, projection_matrix=projection, is_query=True, eps=eps)
        k_features = softmax_kernel(k, projection_matrix=projection, is_query=False, eps=eps)
        return linear_attention(q_features, k_features, v)

    return attend


def approximation_errors(
    performer: PerformerAttention, length: int, heads: int, scales: list[float],
    device: torch.device, draws: int = 3, with_performer_pytorch: bool = True,
) -> list[dict]:
    """One row per input kind and q, k scale: mean |out - exact softmax| of each estimator,
    averaged over `draws` projections. Each draw gives every estimator the same projection,
    so the numbers differ only by what each computes. `performer` is used in eval mode (no
    redraw) and its projection is restored afterwards."""
    saved, was_training = performer.projection.clone(), performer.training
    performer.eval()
    shape = (1, heads, length, performer.head_dim)
    rows = []
    try:
        with torch.no_grad():
            for kind in INPUTS:
                make = random_inputs if kind == "random" else clustered_inputs
                for scale in scales:
                    generator = torch.Generator(device=device).manual_seed(0)
                    q, k, v = make(shape, scale, generator)
                    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
                    errors: dict[str, float] = {}
                    for draw in range(draws):
                        for name, fn in _estimators(performer, draw, device,
                                                    with_performer_pytorch).items():
                            error = (fn(q, k, v).double() - exact).abs().mean().item()
                            errors[name] = errors.get(name, 0.0) + error / draws
                    rows.append({"inputs": kind, "length": length, "qk_scale": scale, **errors})
    finally:
        performer.projection.copy_(saved)
        performer.train(was_training)
    return rows


def _estimators(
    performer: PerformerAttention, draw: int, device: torch.device, with_performer_pytorch: bool
) -> dict[str, Callable]:
    """The estimators compared at one draw, all using that draw's projection."""
    projection = performer.draw_projection(draw).to(device)
    performer.projection.copy_(projection)
    estimators: dict[str, Callable] = {"performer": performer}
    if with_performer_pytorch:
        estimators["performer_pytorch"] = performer_pytorch_fn(projection, PERFORMER_PYTORCH_EPS)
        estimators["performer_pytorch_eps0"] = performer_pytorch_fn(projection, eps=0.0)
    estimators["mean_of_v"] = lambda q, k, v: v.mean(dim=2, keepdim=True)
    return estimators


def error_table(rows: list[dict]) -> list[str]:
    """approximation_errors' rows as aligned text."""
    names = [name for name in rows[0] if name not in ("inputs", "length", "qk_scale")]
    lines = [f"Performer approximation error at N={rows[0]['length']}: mean |out - exact softmax|, "
             "same projections for every estimator",
             f"{'inputs':>10}{'q,k scale':>10}" + "".join(f"{name:>24}" for name in names)]
    for row in rows:
        lines.append(f"{row['inputs']:>10}{row['qk_scale']:>10}"
                     + "".join(f"{row[name]:>24.4f}" for name in names))
    return lines
