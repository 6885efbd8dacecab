"""model.positions=learned: a trained table added to the embedding."""

from __future__ import annotations

from torch import Tensor, nn

from linarena.models.positions.base import Positions


class LearnedPositions(Positions):
    """A trained table added to the embedding, initialised N(0, 0.02^2) (an nn.Embedding, so
    weight_decay_scope=matrices leaves it undecayed, as every embedding table)."""

    name = "learned"
    description = "added to the embedding"

    table_copies = 4  # weight, gradient and the two AdamW moments

    def __init__(self, d_model: int, num_positions: int) -> None:
        super().__init__(d_model, num_positions)
        self.table = nn.Embedding(num_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table.weight[offset : offset + x.shape[1]]
