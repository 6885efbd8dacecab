"""Token plus position embedding for integer token sequences (symbols, bytes or pixel values)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

POSITION_KINDS = ("sinusoidal", "learned")


def sinusoidal_table(num_positions: int, d_model: int) -> Tensor:
    """The fixed table of Vaswani et al. (2017): (num_positions, d_model), sin on even dims,
    cos on odd dims, wavelengths from 2 pi to 10000 * 2 pi."""
    position = torch.arange(num_positions, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(num_positions, d_model)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: d_model // 2])
    return table


class TokenPositionEmbedding(nn.Module):
    """Embeds token ids, optionally puts a learned CLS vector in front, adds a position code,
    then applies dropout (the order of LRA's TransformerEncoder).

    Args:
        num_tokens: rows of the token table; id 0 is padding (zero vector, no gradient; masked
            out everywhere, so its value never reaches a real position).
        d_model: embedding width.
        num_positions: longest token sequence accepted, CLS excluded.
        positions: "sinusoidal" (fixed) or "learned".
        dropout: dropout probability on the sum.
        cls: put a CLS vector (a parameter initialised at zero, as LRA's `cls`) in front; it takes
            position 0 and the tokens positions 1 .. length.
    """

    def __init__(
        self,
        num_tokens: int,
        d_model: int,
        num_positions: int,
        positions: str,
        dropout: float,
        cls: bool = False,
    ) -> None:
        super().__init__()
        if positions not in POSITION_KINDS:
            raise ValueError(
                f"model.positions must be one of {list(POSITION_KINDS)}, got {positions!r}."
            )
        self.tokens = nn.Embedding(num_tokens, d_model, padding_idx=0)
        self.cls = nn.Parameter(torch.zeros(d_model)) if cls else None
        self.positions = positions
        num_positions += int(cls)
        if positions == "learned":
            self.learned_positions = nn.Embedding(num_positions, d_model)
            nn.init.normal_(self.learned_positions.weight, std=0.02)
        else:
            # Not persistent: it is a function of the shapes, so checkpoints need not carry it.
            self.register_buffer(
                "position_table", sinusoidal_table(num_positions, d_model), persistent=False
            )
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (batch, length) int64 -> (batch, length + 1 if cls else length, d_model)."""
        x = self.tokens(tokens)
        if self.cls is not None:
            x = torch.cat([self.cls.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)
        length = x.shape[1]
        if self.positions == "learned":
            position_codes = self.learned_positions.weight[:length]
        else:
            position_codes = self.position_table[:length]
        return self.dropout(x + position_codes)
