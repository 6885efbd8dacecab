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
        check_token_ids(tokens, self.tokens.num_embeddings)
        x = self.tokens(tokens)
        if self.cls is not None:
            x = torch.cat([self.cls.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)
        return self.dropout(self.positions.embed(x))


def check_token_ids(tokens: Tensor, num_tokens: int) -> None:
    """Refuse token ids outside [0, num_tokens) before the embedding, which would fail deep
    inside (an IndexError on CPU, a device-side assert on CUDA). One min/max pass over the ids;
    on CUDA and under torch.compile an asynchronous assert, so that no step waits on the GPU
    (the error surfaces at the next synchronisation)."""
    if tokens.numel() == 0:
        return
    low, high = torch.aminmax(tokens)
    what = f"token ids must lie in [0, {num_tokens - 1}] (vocab_size={num_tokens})"
    fix = "map them into the vocabulary (0 is padding) or build the model with a larger vocab_size"
    if tokens.is_cuda or torch.compiler.is_compiling():
        torch._assert_async((low >= 0) & (high < num_tokens), f"{what}; {fix}.")
    elif low < 0 or high >= num_tokens:
        raise ValueError(f"{what}, got ids from {int(low)} to {int(high)}: {fix}.")


def _rename_learned_positions(module, state_dict, prefix, *args) -> None:
    """Checkpoints written before positions were a seam keep loading: their learned table
    `learned_positions.weight` is now `positions.table.weight`."""
    old = prefix + "learned_positions.weight"
    if old in state_dict:
        state_dict[prefix + "positions.table.weight"] = state_dict.pop(old)
