"""Performer attention (Choromanski et al. 2021): FAVOR+ random features."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.linear import LinearAttention
from linarena.attention.maps.performer import PerformerFeatures
from linarena.attention.rotation import Rotation


class PerformerAttention(LinearAttention):
    """LinearAttention whose features estimate the softmax kernel exp(q . k / sqrt(d))
    (PerformerFeatures: the projection, its seeds and its redraw schedule).

    Args:
        num_features: m, the number of random features.
        kernel: "softmax" (FAVOR+ positive features) or "relu" (generalized attention).
        redraw_interval: redraw every this many training-mode forward calls (one per training
            batch); None or 0 never redraws.
        seed: seed of the draws; None takes one from torch's global generator (so
            `seed_everything` makes it reproducible and each layer gets its own).
        eps: added to the true FAVOR+ normaliser (the stabilisers rescale it, and eps with
            it). 0 by default: FAVOR+ features are positive, a row whose normaliser underflows
            to 0 gets output 0 (see engine/linear/common.py), and any fixed eps biases the estimator
            at large |q|, where its normalisers fall far below any fixed eps (1e-77 at
            |q| = 24, d = 16).
        head_dim, causal, chunk_size, backend, rotary: see LinearAttention.
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        num_features: int = 256,
        kernel: str = "softmax",
        redraw_interval: int | None = None,
        seed: int | None = None,
        eps: float = 0.0,
        chunk_size: int = 64,
        backend: str = "auto",
        rotary: Rotation | None = None,
    ) -> None:
        features = PerformerFeatures(num_features, kernel, redraw_interval, seed)
        super().__init__(head_dim, causal, feature_map=features, eps=eps, chunk_size=chunk_size,
                         backend=backend, rotary=rotary)
        self.register_load_state_dict_pre_hook(_rename_pre_feature_map_keys)

    @property
    def projection(self) -> Tensor:
        """(num_features, head_dim): the rows omega_i of the current draw."""
        return self.feature_map.projection

    @property
    def num_features(self) -> int:
        return self.feature_map.m

    @property
    def kernel(self) -> str:
        return self.feature_map.kernel

    @property
    def seed(self) -> int:
        return self.feature_map.seed

    @property
    def redraw_interval(self) -> int:
        return self.feature_map.redraw_interval

    @property
    def draws(self) -> int:
        """How many times the projection was redrawn."""
        return self.feature_map.draws

    @property
    def training_calls(self) -> int:
        """Training-mode forward calls so far, what the redraw schedule counts."""
        return self.feature_map.training_calls

    def draw_projection(self, draw: int) -> Tensor:
        """The projection of draw number `draw` (see PerformerFeatures.draw_projection)."""
        return self.feature_map.draw_projection(draw)

    def redraw(self) -> None:
        """Replace the projection with the next draw."""
        self.feature_map.redraw()


def _rename_pre_feature_map_keys(module, state_dict, prefix, *args) -> None:
    """Checkpoints written before the feature map was a submodule keep loading: their
    `projection` and schedule state (`_extra_state`) now live under `feature_map.`."""
    for key in ("projection", "_extra_state"):
        if prefix + key in state_dict:
            state_dict[prefix + "feature_map." + key] = state_dict.pop(prefix + key)
