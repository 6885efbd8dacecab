"""Relative positions inside attention: a core built with `rotary=` (an object with
`rotate(q, k, positions)`, e.g. linarena.models.positions.RotaryPositions, which the model passes
under model.positions=rope) rotates its q and k by their absolute positions once per call, at its
family's place: softmax before the scores (softmax.py), feature maps before the map (linear.py),
recurrences after their own q, k transforms, before the recurrence (recurrent/core.py). Causal
calls that continue a state (initial_state, step()) rotate from the state's position on.

A core built with `score_bias=` (an object with `score_bias(queries, keys, heads, dtype)`, e.g.
linarena.models.positions.AlibiPositions, passed under model.positions=alibi) adds that bias to
its scores before the softmax; only the cores that compute scores take it (softmax.py,
sliding_window.py: their class sets `takes_score_bias = True`)."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor


class Rotation(Protocol):
    """What a core needs of a relative position kind."""

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """q, k: (batch, heads, n, head_dim) at absolute `positions` (n,) -> rotated q, k."""
        ...


class ScoreBias(Protocol):
    """What a core needs of a position kind that biases the attention scores."""

    def score_bias(self, queries: Tensor, keys: Tensor, heads: int, dtype: torch.dtype
                   ) -> Tensor:
        """The bias of the scores of the queries at positions `queries` (n_q,) and the keys at
        `keys` (n_k,): (heads, n_q, n_k) of `dtype`."""
        ...


def rotate_from(rotary: Rotation | None, q: Tensor, k: Tensor, start: int,
                width: int | None = None) -> tuple[Tensor, Tensor]:
    """q, k (batch, heads, n, head_dim) of the tokens at positions start .. start + n - 1,
    rotated by `rotary`; as they are when it is None. Padded tokens keep their index (positions
    are places in the sequence, as for an absolute table), so real tokens never move. `width`:
    only the first `width` components are read (a feature map's input_dim), and they are
    rotated as q, k of that width (the rest as they are)."""
    if rotary is None:
        return q, k
    positions = torch.arange(start, start + q.shape[2], device=q.device)
    if width is None or width >= q.shape[-1]:
        return rotary.rotate(q, k, positions)
    read_q, read_k = rotary.rotate(q[..., :width], k[..., :width], positions)
    return (torch.cat([read_q, q[..., width:]], dim=-1),
            torch.cat([read_k, k[..., width:]], dim=-1))
