"""model.positions=none."""

from __future__ import annotations

from linarena.models.positions.base import Positions


class NoPositions(Positions):
    """No position information: attention then sees the order only through its own structure
    (the causal mask, the decays and gates of the recurrences, cosFormer's distance weights)."""

    name = "none"
    description = "no positions"
