"""Performer attention (Choromanski et al. 2021): FAVOR+ random features."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import Tensor

from linarena.attention.feature_maps import (
    FeatureOutput,
    orthogonal_gaussian_projection,
    performer_relu_features,
    performer_relu_features_vjp,
    performer_softmax_features,
    performer_softmax_features_vjp,
)
from linarena.attention.linear import LinearAttention
from linarena.attention.linear_kernels import FeatureVjp

KERNELS = ("softmax", "relu")


class PerformerAttention(LinearAttention):
    """Linear attention whose features estimate the softmax kernel exp(q . k / sqrt(d)).

    The projection lives in the buffer `projection` (num_features, head_dim), one row per
    omega_i, built from orthogonal blocks. Draw number r uses a generator seeded from
    (seed, r), so every draw is reproducible and identical on every rank of a multi-device run.
    In training, the projection is redrawn every `redraw_interval` forward calls; never in eval.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        num_features: m, the number of random features.
        kernel: "softmax" (FAVOR+ positive features) or "relu" (generalized attention).
        redraw_interval: redraw every this many training steps; None or 0 never redraws.
        seed: seed of the draws; None takes one from torch's global generator (so
            `seed_everything` makes it reproducible and each layer gets its own).
        eps: guards 0/0 only: the features are positive, and with the stabilisers the
            normaliser is on an arbitrary scale, so a larger eps would bias the output.
        chunk_size: see LinearAttention.
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        num_features: int = 256,
        kernel: str = "softmax",
        redraw_interval: int | None = None,
        seed: int | None = None,
        eps: float = 1e-12,
        chunk_size: int = 64,
    ) -> None:
        super().__init__(head_dim, causal=causal, eps=eps, chunk_size=chunk_size)
        if kernel not in KERNELS:
            raise ValueError(f"PerformerAttention: kernel must be one of {KERNELS}, got {kernel!r}.")
        if num_features < 1:
            raise ValueError(f"PerformerAttention: num_features must be >= 1, got {num_features}.")
        if redraw_interval is not None and redraw_interval < 0:
            raise ValueError(f"redraw_interval must be >= 0 or None, got {redraw_interval}.")
        self.num_features = num_features
        self.kernel = kernel
        self.redraw_interval = redraw_interval or 0
        self.seed = int(torch.randint(0, 2**31 - 1, ()).item()) if seed is None else seed
        self.draws = 0  # how many times the projection was redrawn
        self.training_steps = 0  # training forward calls, for the redraw schedule
        self.register_buffer("projection", self.draw_projection(0))

    def draw_projection(self, draw: int) -> Tensor:
        """The projection of draw number `draw`: (num_features, head_dim), float32, on CPU."""
        state = np.random.SeedSequence([self.seed, draw]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(state))
        return orthogonal_gaussian_projection(self.num_features, self.head_dim, generator)

    def redraw(self) -> None:
        """Replace the projection with the next draw (in place, so DDP's buffer sync holds)."""
        self.draws += 1
        self.projection.copy_(self.draw_projection(self.draws))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        if self.training and self.redraw_interval:
            self._advance_redraw_schedule()
        return super().forward(q, k, v, mask)

    @torch.compiler.disable
    def _advance_redraw_schedule(self) -> None:
        """Count a training step; redraw every redraw_interval steps. Runs outside torch.compile
        graphs (a graph break): traced, the Python counter would be baked into the graph as a
        constant and every step would recompile."""
        self.training_steps += 1
        if self.training_steps % self.redraw_interval == 0:
            self.redraw()

    def feature_map(
        self, x: Tensor, positions: Tensor, context: Any, is_query: bool,
        out: Tensor | None = None,
    ) -> FeatureOutput:
        projection = context.to(x.dtype)
        if self.kernel == "relu":
            return performer_relu_features(x, projection, out)
        return performer_softmax_features(x, projection, is_query, out)

    def feature_map_vjp(self, context: Any) -> FeatureVjp:
        if self.kernel == "relu":
            return functools.partial(performer_relu_features_vjp, projection=context)
        return functools.partial(performer_softmax_features_vjp, projection=context)

    def feature_context(self, mask: Tensor | None, batch: int, length: int, device) -> Tensor:
        """A snapshot of the projection, so that a redraw before this call's backward (a second
        forward first, as activation checkpointing does) cannot change what the backward
        recomputes."""
        return self.projection.clone()

    # The schedule counters are plain ints (no GPU sync to read them) saved in checkpoints.
    def get_extra_state(self) -> dict[str, Any]:
        return {"seed": self.seed, "draws": self.draws, "training_steps": self.training_steps}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.seed, self.draws = state["seed"], state["draws"]
        self.training_steps = state["training_steps"]

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, num_features={self.num_features}, kernel={self.kernel}, "
            f"redraw_interval={self.redraw_interval}, seed={self.seed}"
        )
