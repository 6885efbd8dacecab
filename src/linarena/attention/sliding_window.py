"""Sliding-window softmax attention: exact softmax over a band of keys around each query, in
O(N w) time and memory, on PyTorch's scaled_dot_product_attention for all blocks of queries in
one call (on CUDA a fused kernel that takes a mask, e.g. the memory-efficient one; flash takes
none)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.rotation import Rotation, ScoreBias, rotate_from
from linarena.attention.softmax import ExactAttention
from linarena.attention.validation import (
    check_attention_inputs,
    check_right_padded,
    check_state,
    check_state_kind,
    empty_output,
    zero_padding,
)


@dataclass
class WindowState:
    """What causal sliding-window attention keeps after `position` tokens: the last window - 1
    keys and values of each sequence (all the next token can see besides itself), oldest first,
    right-aligned, so that a sequence shorter than that has its real entries in the last
    `filled` slots and zeros before them.

    k: (batch, heads, window - 1, head_dim), rotated at their positions (rotary); v: (batch,
    heads, window - 1, d_v); filled: int64 (batch,), real entries per sequence (right padding
    leaves rows of one batch with different counts); made_by: the module kind that made it.
    """

    k: Tensor
    v: Tensor
    filled: Tensor
    position: int
    made_by: str = ""


class SlidingWindowAttention(ExactAttention):
    """softmax(q_i k_j / sqrt(head_dim)) over the keys j of query i's window, times v_j.

    The window: causal, keys i - window < j <= i (the query and the window - 1 before it, as
    Longformer's, Mistral's and fla's causal windows); bidirectional, |i - j| < window (window - 1
    on each side). window >= length gives full softmax attention.

    Computed in blocks of c = min(window, length) queries: block b attends to the
    c + (window - 1) (causal) or c + 2 (window - 1) (bidirectional) keys its queries can reach,
    under a band mask, so no length x length score matrix is formed: scores, mask and the key
    windows take O(length x window) memory.

    Padding: padded keys get no weight; a padded query's output is 0 (it sees, inside the
    computation, only its own zeroed key, so that no softmax row is empty and nothing is NaN).
    A real query always sees its own key, so every real row has a real key.

    Args:
        head_dim: size of each head's q and k vectors.
        causal: position i attends to positions <= i only.
        window: keys per side, the query included (see above); >= 1.
        dropout: dropout probability on the attention weights, in training mode only.
        backend: "auto" or "torch" (the same: PyTorch's scaled_dot_product_attention); "fla" is
            refused: fla-core's windowed attention kernel is not wired in here.
        rotary: relative positions (linarena.attention.rotation): q and k rotated by their
            positions before the scores, as softmax does; None: none.
        score_bias: relative positions added to the scores before the softmax (ALiBi), from
            the distance of each query to each key of its window, so that a call continuing a
            state (a second forward, step()) adds what the whole sequence's call adds; None:
            none. It goes into SDPA as a float mask with -inf outside the band and on padding.
    """

    no_fla_kernel = ("sliding-window attention runs PyTorch's scaled_dot_product_attention "
                     "block by block; fla-core's windowed attention kernel is not wired in, "
                     "so it has no kernel for it here")

    def __init__(self, head_dim: int, causal: bool = False, window: int = 64,
                 dropout: float = 0.0, backend: str = "auto",
                 rotary: Rotation | None = None, score_bias: ScoreBias | None = None) -> None:
        super().__init__(head_dim, causal, dropout, backend, rotary, score_bias)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"{type(self).__name__}: window must be a positive integer, got "
                             f"{window!r}.")
        self.window = window

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
        initial_state: WindowState | None = None, return_state: bool = False,
    ) -> Tensor | tuple[Tensor, WindowState]:
        """q, k: (batch, heads, length, head_dim); v: (batch, heads, length, d_v); mask: bool
        (batch, length), True = real.

        Causal mode only: `initial_state` continues a sequence from the window of its earlier
        tokens (forward(..., return_state=True) or step()), at the positions after them;
        `return_state=True` also returns the window after these tokens (padded ones left out;
        the mask must then be right-padded).

        Returns (batch, heads, length, d_v), or (that, state) with return_state; length 0 gives
        an empty output and the state unchanged.
        """
        name = type(self).__name__
        check_attention_inputs(q, k, v, mask, self.head_dim, name)
        if (initial_state is not None or return_state) and not self.causal:
            raise ValueError(f"{name}: initial_state and return_state are for causal mode; "
                             "build the module with causal=True.")
        if return_state and mask is not None:
            check_right_padded(mask, name)  # the state keeps each row's last real tokens
        if initial_state is not None:
            self._check_state(initial_state, k, v)
        self.backend_used = "torch"
        batch, _, length, _ = q.shape
        start = 0 if initial_state is None else initial_state.position
        stateful = initial_state is not None or return_state
        # A window covering the call's tokens is full attention over them: with no state to
        # carry on, cut it to their number, so that nothing of the window's size is allocated
        # (window=10**9 on 512 tokens is window=512).
        window = self.window if stateful else max(1, min(self.window, length))
        state = self._empty_state(k, v, window) if initial_state is None else initial_state
        if length == 0:
            out = empty_output(v)
            return (out, state) if return_state else out
        q, k, v = (zero_padding(t, mask) for t in (q, k, v))
        q, k = rotate_from(self.rotary, q, k, start)
        # Keys and values behind the first query: the window's earlier tokens (causal) or
        # nothing (bidirectional: window - 1 empty slots, so both modes index alike).
        keys = torch.cat([state.k.to(k.dtype), k], dim=2)
        values = torch.cat([state.v.to(v.dtype), v], dim=2)
        slots = window - 1
        before = torch.arange(slots, device=q.device) >= slots - state.filled[:, None]
        real = torch.ones(batch, length, dtype=torch.bool, device=q.device) if mask is None \
            else mask
        out = self._banded(q, keys, values, torch.cat([before, real], dim=1), real, window)
        if mask is not None:
            out = torch.where(mask[:, None, :, None], out, 0.0)
        if not return_state:
            return out
        lengths = real.sum(-1)
        # Row b's last window - 1 keys end at its last real token: slots + lengths[b] - 1.
        index = (lengths[:, None] + torch.arange(slots, device=q.device))[:, None, :, None]
        new = WindowState(
            keys.gather(2, index.expand(-1, keys.shape[1], -1, keys.shape[-1])),
            values.gather(2, index.expand(-1, values.shape[1], -1, values.shape[-1])),
            (state.filled + lengths).clamp(max=slots), start + length, self.made_by())
        return out, new

    def step(self, q: Tensor, k: Tensor, v: Tensor, state: WindowState | None = None
             ) -> tuple[Tensor, WindowState]:
        """Recurrent form of causal mode: one token at a time, same outputs as forward().

        q, k: (batch, heads, head_dim); v: (batch, heads, d_v); state: None for the first token,
        then the state returned by the previous call (or by forward(..., return_state=True)).
        Returns (output (batch, heads, d_v), new state).
        """
        name = type(self).__name__
        if not self.causal:
            raise RuntimeError(f"{name}.step() is the recurrent form of causal attention; "
                               "build the module with causal=True.")
        if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != q.shape[:2]:
            raise ValueError("step() takes one token: q, k, v of shape (batch, heads, head_dim), "
                             f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}.")
        out, new = self(q[:, :, None], k[:, :, None], v[:, :, None], initial_state=state,
                        return_state=True)
        return out[:, :, 0], new

    def state_size(self) -> int:
        """Numbers of one head's state per sequence: the window - 1 keys and values it keeps
        (the shared count of filled slots, one number per sequence, aside)."""
        return 2 * (self.window - 1) * self.head_dim

    def made_by(self) -> str:
        """The module kind and sizes a state of this module records."""
        return f"{type(self).__name__}(window={self.window}) at head_dim={self.head_dim}"

    def _banded(self, q: Tensor, keys: Tensor, values: Tensor, key_real: Tensor,
                query_real: Tensor, window: int) -> Tensor:
        """Softmax attention of q (batch, heads, n, head_dim) over keys, values (batch, heads,
        slots + n, .), query i being key slots + i (slots = window - 1), under the band and
        key_real (batch, slots + n); query_real (batch, n) says which queries are real.
        Returns (batch, heads, n, d_v), padded queries' rows finite and meaningless."""
        batch, heads, n, _ = q.shape
        d_v = values.shape[-1]
        slots = window - 1
        size = min(window, n)  # queries per block
        blocks = -(-n // size)
        reach = slots * (2 - self.causal)  # the band: key - query in [0, reach], key indices
        span = size + reach  # keys a block can see
        # Pad to whole blocks (and, bidirectional, the window after the last query).
        extra = blocks * size - n + (reach - slots)
        keys, values = (F.pad(t, (0, 0, 0, extra)) for t in (keys, values))
        key_real = F.pad(key_real, (0, extra), value=False)
        query_real = F.pad(query_real, (0, blocks * size - n), value=False)
        index = (torch.arange(blocks, device=q.device)[:, None] * size
                 + torch.arange(span, device=q.device))  # (blocks, span): a block's keys
        offset = torch.arange(span, device=q.device) - torch.arange(size, device=q.device)[:, None]
        band = (offset >= 0) & (offset <= reach)  # (size, span), the same in every block
        own = offset == slots  # each query's own key
        allowed = band & key_real[:, index][:, :, None, :]  # (batch, blocks, size, span)
        # A padded query sees its own (zeroed) key alone: no empty softmax row, so no NaN.
        allowed = allowed | (own & ~query_real.view(batch, blocks, size, 1))
        attn_mask = allowed.view(batch * blocks, 1, size, span)
        if self.score_bias is not None:
            # Query r of a block is key slots + r of it, key s is key s: their distance is
            # slots + r - s in every block, whatever the block's or the state's position.
            bias = self.score_bias.score_bias(torch.arange(size, device=q.device) + slots,
                                              torch.arange(span, device=q.device), heads, q.dtype)
            attn_mask = bias.masked_fill(~attn_mask, -torch.inf)  # (batch * blocks, heads, ...)

        def per_block(t: Tensor, width: int) -> Tensor:
            """(batch, heads, blocks, width, dim) -> (batch * blocks, heads, width, dim): the
            blocks in the batch dimension, so that one 4-d SDPA call (a fused kernel on CUDA)
            takes every block with the mask broadcast over the heads."""
            return t.transpose(1, 2).reshape(batch * blocks, heads, width, t.shape[-1])

        q = F.pad(q, (0, 0, 0, blocks * size - n)).unflatten(2, (blocks, size))
        out = F.scaled_dot_product_attention(
            per_block(q, size), per_block(keys[:, :, index], span),
            per_block(values[:, :, index], span),
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0)
        # d_v, not -1: an empty batch has no size to infer.
        out = out.view(batch, blocks, heads, size, d_v).transpose(1, 2).flatten(2, 3)
        return out[:, :, :n]

    def _empty_state(self, k: Tensor, v: Tensor, window: int) -> WindowState:
        """The state before any token of a window of `window`, for a batch shaped like k, v
        (batch, heads, ., .)."""
        batch, heads = k.shape[:2]
        slots = window - 1
        return WindowState(k.new_zeros(batch, heads, slots, k.shape[-1]),
                           v.new_zeros(batch, heads, slots, v.shape[-1]),
                           torch.zeros(batch, dtype=torch.long, device=k.device), 0,
                           self.made_by())

    def _check_state(self, state: WindowState, k: Tensor, v: Tensor) -> None:
        """Refuse a state of another module kind, window, batch, head count or dtype."""
        check_state_kind(state, WindowState, type(self).__name__)
        shape = {"batch": k.shape[0], "heads": k.shape[1], "window - 1": self.window - 1,
                 "head_dim": self.head_dim}
        check_state(state.made_by, state.k, self.made_by(), shape, k.dtype,
                    type(self).__name__)
        if state.v.shape[-1] != v.shape[-1]:
            raise ValueError(f"{type(self).__name__}: the state's values are "
                             f"{state.v.shape[-1]} wide, these {v.shape[-1]}.")

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, causal={self.causal}, window={self.window}, "
                f"dropout={self.dropout}")
