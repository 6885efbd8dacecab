"""What every kind of positions declares: the base class the kinds of registry.POSITIONS
subclass."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn


class Positions(nn.Module):
    """A kind of position information; this base adds, rotates and biases nothing. Absolute
    kinds override `embed`, relative kinds `rotate` (and set `rotates = True`) or `score_bias`
    (and set `biases = True`).

    Args:
        d_model: the embedding's width.
        num_positions: positions a table must cover (the CLS position included).
    """

    # model.positions=<name> selects the kind (registry.POSITIONS collects every subclass in a
    # module of this package that sets it), described in an error message as `description`.
    name: ClassVar[str]
    description: ClassVar[str]
    # Whether the model hands this object to its attention cores, which then call rotate().
    # They share it, so such a kind holds no parameters or persistent buffers.
    rotates: ClassVar[bool] = False
    # Whether the model hands this object to its attentions, which then add score_bias() to
    # their scores; shared in the same way, so it holds no parameters or persistent buffers.
    biases: ClassVar[bool] = False
    # Copies of a (num_positions, d_model) float32 table the kind keeps while training, for the
    # memory check before a run (training/memory.py).
    table_copies: ClassVar[int] = 0

    def __init__(self, d_model: int, num_positions: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.num_positions = num_positions

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, n, d_model), the tokens at positions offset .. offset + n - 1 -> x plus
        their position codes, (batch, n, d_model)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q, k: (batch, heads, n, head_dim) of the tokens at the absolute `positions` (n,) ->
        q, k rotated, same shapes and dtypes."""
        return q, k

    def score_bias(self, queries: Tensor, keys: Tensor, heads: int, dtype: torch.dtype
                   ) -> Tensor:
        """The bias added to the scores q_i . k_j / sqrt(head_dim) of the queries at positions
        `queries` (n_q,) and the keys at `keys` (n_k,): (heads, n_q, n_k) of `dtype`."""
        return torch.zeros(heads, len(queries), len(keys), dtype=dtype, device=queries.device)
