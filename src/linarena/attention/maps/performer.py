"""Performer features (Choromanski et al. 2021): FAVOR+ random features of the softmax kernel."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from linarena.attention.buffers import write_into
from linarena.attention.feature_map import FeatureMap, FeatureOutput, FeatureVjp

KERNELS = ("softmax", "relu")
RELU_FEATURE_FLOOR = 1e-3  # Performer's "generalized attention" adds it to every feature


class PerformerFeatures(FeatureMap):
    """Random features whose dot products estimate exp(q . k / sqrt(d)) (kernel="softmax").

    The projection is the buffer `projection` (num_features, head_dim), one row per omega_i,
    built from orthogonal blocks in setup(). Draw number r uses a generator seeded from
    (seed, r), so every draw is reproducible and identical on every rank of a multi-device run.
    The projection is redrawn every `redraw_interval` forward calls in training mode, never in
    eval: one call per training batch, so with gradient accumulation or activation
    checkpointing (which repeats the forward) the interval counts calls (`training_calls`),
    not optimizer steps.

    Args:
        num_features: m, the number of random features.
        kernel: "softmax" (FAVOR+ positive features) or "relu" (generalized attention).
        redraw_interval: redraw every this many training-mode forward calls; None or 0 never.
        seed: seed of the draws; None takes one from torch's global generator when the layer
            is built (so `seed_everything` makes it reproducible and each layer gets its own).
    """

    def __init__(
        self,
        num_features: int = 256,
        kernel: str = "softmax",
        redraw_interval: int | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"Performer: kernel must be one of {KERNELS}, got {kernel!r}.")
        if num_features < 1:
            raise ValueError(f"Performer: num_features must be >= 1, got {num_features}.")
        if redraw_interval is not None and redraw_interval < 0:
            raise ValueError(f"redraw_interval must be >= 0 or None, got {redraw_interval}.")
        self.m = num_features
        self.kernel = kernel
        self.redraw_interval = redraw_interval or 0
        self.seed = seed
        self.head_dim = 0
        self.draws = 0  # how many times the projection was redrawn
        self.training_calls = 0  # training-mode forward calls, for the redraw schedule

    def num_features(self, head_dim: int) -> int:
        return self.m

    def setup(self, head_dim: int, causal: bool) -> None:
        self.head_dim = head_dim
        if self.seed is None:
            self.seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self.register_buffer("projection", self.draw_projection(0))

    def draw_projection(self, draw: int) -> Tensor:
        """The projection of draw number `draw`: (num_features, head_dim), float32, on CPU."""
        state = np.random.SeedSequence([self.seed, draw]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(state))
        return orthogonal_gaussian_projection(self.m, self.head_dim, generator)

    def redraw(self) -> None:
        """Replace the projection with the next draw (in place, so DDP's buffer sync holds)."""
        self.draws += 1
        self.projection.copy_(self.draw_projection(self.draws))

    def on_training_call(self) -> None:
        if self.redraw_interval:
            self._advance_redraw_schedule()

    @torch.compiler.disable
    def _advance_redraw_schedule(self) -> None:
        """Count a training call; redraw every redraw_interval calls. Runs outside torch.compile
        graphs (a graph break): traced, the Python counter would be baked into the graph as a
        constant and every step would recompile."""
        self.training_calls += 1
        if self.training_calls % self.redraw_interval == 0:
            self.redraw()

    def context(self, mask: Tensor | None, batch: int, length: int, device) -> Tensor:
        """A snapshot of the projection, so that a redraw before this call's backward (a second
        forward first, as activation checkpointing does) cannot change what it recomputes."""
        return self.projection.clone()

    writes_into = True

    def features(self, x: Tensor, positions: Tensor, context: Tensor, is_query: bool,
                 out: Tensor | None = None) -> FeatureOutput:
        projection = context.to(x.dtype)
        if self.kernel == "relu":
            return performer_relu_features(x, projection, out), None
        return performer_softmax_features(x, projection, out)

    def vjp(self, context: Tensor) -> FeatureVjp:
        if self.kernel == "relu":
            return functools.partial(performer_relu_features_vjp, projection=context)
        return functools.partial(performer_softmax_features_vjp, projection=context)

    # The schedule counters are plain ints (no GPU sync to read them) saved in checkpoints.
    def get_extra_state(self) -> dict[str, Any]:
        return {"seed": self.seed, "draws": self.draws, "training_calls": self.training_calls}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.seed, self.draws = state["seed"], state["draws"]
        # Checkpoints written before the rename call the counter training_steps.
        self.training_calls = state.get("training_calls", state.get("training_steps", 0))

    def extra_repr(self) -> str:
        return (f"num_features={self.m}, kernel={self.kernel}, "
                f"redraw_interval={self.redraw_interval}, seed={self.seed}")


def _batched(matrix: Tensor, like: Tensor) -> Tensor:
    """matrix (r, c) expanded to (batch, heads, r, c) like `like`: a batched matmul then reads a
    strided q or k (a view of the model's qkv projection) in place instead of copying it."""
    return matrix.expand(*like.shape[:2], *matrix.shape)


def performer_softmax_features(x: Tensor, projection: Tensor, out: Tensor | None = None
                               ) -> FeatureOutput:
    """FAVOR+ positive random features (Choromanski et al. 2021).

    phi(x) = m^(-1/2) exp(W x' - |x'|^2 / 2) with x' = x d^(-1/4), so that E[phi(q) . phi(k)]
    = exp(q . k / sqrt(d)). Factors shared by all features of one token are kept out of phi and
    returned as its log_scale, max_i (W x')_i - |x'|^2 / 2 - ln(m) / 2: a query's cancels
    between numerator and denominator (it only places eps on the true denominator), a key's is
    applied relative to a maximum over the keys each query may see. Every exp() therefore has
    a non-positive argument.

    Args:
        x: (batch, heads, n, d).
        projection: (m, d), rows omega_i.
        out: a (batch, heads, n, m) buffer for phi, or None.
    Returns phi (batch, heads, n, m) and log_scale (batch, heads, n).
    """
    scale = x.shape[-1] ** -0.25
    weights = _batched(projection.t() * scale, x)  # (batch, heads, d, m)
    logits = torch.matmul(x, weights) if out is None else write_into(out, torch.matmul, x, weights)
    row_max = logits.amax(dim=-1, keepdim=True).detach()
    phi = logits.sub_(row_max).exp_()  # in place: two passes over the largest tensor, not four
    constant = 0.5 * math.log(projection.shape[0])
    # |x|^2 as a norm: a reduction, without an (n, d) temporary.
    squared = torch.linalg.vector_norm(x, dim=-1).square()
    return phi, row_max.squeeze(-1) - 0.5 * scale**2 * squared - constant


def performer_softmax_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    projection: Tensor,
) -> Tensor:
    """Backward of performer_softmax_features (overwriting grad_phi).

    phi = exp(x W'^T - c) with W' = projection * d^(-1/4), so d loss / d x = (grad_phi * phi) W';
    the log_scale c - d^(-1/2) |x|^2 / 2 - ln(m) / 2 adds -d^(-1/2) x grad_log_scale. The row
    maximum c is a stabiliser taken as a constant in both, as in the forward pass.
    """
    scale = x.shape[-1] ** -0.25
    grad_x = torch.matmul(grad_phi.mul_(phi), _batched(projection.to(x.dtype) * scale, x))
    if grad_log_scale is not None:
        grad_x.addcmul_(x, grad_log_scale[..., None], value=-(scale**2))
    return grad_x


def performer_relu_features(x: Tensor, projection: Tensor, out: Tensor | None = None) -> Tensor:
    """Performer's "generalized attention": phi(x) = relu(W x') + 1e-3, x' = x d^(-1/4).

    x: (batch, heads, n, d); projection: (m, d); out: a (batch, heads, n, m) buffer for phi, or
    None. Returns phi (batch, heads, n, m).
    """
    weights = _batched(projection.t() * x.shape[-1] ** -0.25, x)
    if out is None:
        return torch.matmul(x, weights).relu_() + RELU_FEATURE_FLOOR
    return write_into(out, torch.matmul, x, weights).relu_().add_(RELU_FEATURE_FLOOR)


def performer_relu_features_vjp(
    x: Tensor, positions: Tensor, phi: Tensor, grad_phi: Tensor, grad_log_scale: Tensor | None,
    projection: Tensor,
) -> Tensor:
    """Backward of performer_relu_features (overwriting grad_phi):
    d loss / d x = (grad_phi * [W x' > 0]) W'. W x' > 0 is read off phi > floor, which differs
    only for logits too small (about 1e-10 in float32) to change the floor."""
    weights = _batched(projection.to(x.dtype) * x.shape[-1] ** -0.25, x)
    return torch.matmul(grad_phi.mul_(phi > RELU_FEATURE_FLOOR), weights)


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
