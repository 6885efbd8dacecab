"""Token embedding for integer token sequences (symbols, bytes or pixel values), with the
model's position information (linarena.models.positions) added when its kind is absolute."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linarena.models.positions import build_positions, check_positions_kind


class TokenPositionEmbedding(nn.Module):
    """Embeds token ids, optionally puts a learned CLS vector in front, applies the position
    kind's `embed` (a code added for sinusoidal and learned, nothing for none and rope), then
    dropout (the order of LRA's TransformerEncoder).

    Args:
        num_tokens: rows of the token table; id 0 is padding (zero vector, no gradient; masked
            out everywhere, so its value never reaches a real position).
        d_model: embedding width.
        num_positions: longest token sequence accepted, CLS excluded.
        positions: a kind of linarena.models.positions.POSITIONS; the object is `self.positions`
            (the model hands it to the attention cores when it rotates q and k).
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
        check_positions_kind(positions)
        self.tokens = nn.Embedding(num_tokens, d_model, padding_idx=0)
        self.cls = nn.Parameter(torch.zeros(d_model)) if cls else None
        # Built after the token table: a learned table draws its initial values after it, so a
        # seed gives the weights it gave before positions were a seam.
        self.positions = build_positions(positions, d_model, num_positions + int(cls))
        self.dropout = nn.Dropout(dropout)
        self.register_load_state_dict_pre_hook(_rename_learned_positions)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (batch, length) int64 -> (batch, length + 1 if cls else length, d_model)."""
        x = self.tokens(tokens)
        if self.cls is not None:
            x = torch.cat([self.cls.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)
        return self.dropout(self.positions.embed(x))


def _rename_learned_positions(module, state_dict, prefix, *args) -> None:
    """Checkpoints written before positions were a seam keep loading: their learned table
    `learned_positions.weight` is now `positions.table.weight`."""
    old = prefix + "learned_positions.weight"
    if old in state_dict:
        state_dict[prefix + "positions.table.weight"] = state_dict.pop(old)
