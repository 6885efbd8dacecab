"""model.positions=sinusoidal: the fixed table of Vaswani et al. (2017), LRA's default."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from linarena.models.positions.base import Positions


def sinusoidal_table(num_positions: int, d_model: int) -> Tensor:
    """The fixed table of Vaswani et al. (2017): (num_positions, d_model), sin on even dims,
    cos on odd dims, wavelengths from 2 pi to 10000 * 2 pi."""
    position = torch.arange(num_positions, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32)
                     * (-math.log(10000.0) / d_model))
    table = torch.zeros(num_positions, d_model)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: d_model // 2])
    return table


class SinusoidalPositions(Positions):
    """The fixed sinusoidal table added to the embedding (LRA's default)."""

    name = "sinusoidal"
    description = "added to the embedding"

    table_copies = 2  # the table, and one temporary of its size while it is computed

    def __init__(self, d_model: int, num_positions: int) -> None:
        super().__init__(d_model, num_positions)
        # Not persistent: it is a function of the shapes, so checkpoints need not carry it.
        self.register_buffer("table", sinusoidal_table(num_positions, d_model), persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table[offset : offset + x.shape[1]]
