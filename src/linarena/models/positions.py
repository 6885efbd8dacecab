"""Position information, one kind per model:
`model.positions=none|sinusoidal|learned|rope|alibi`.

Absolute kinds add a code to the token embedding (`embed`); relative kinds rotate q and k inside
every attention layer (`rotate`) or add a bias to its scores (`score_bias`). The embedding builds
the model's one object of its kind and applies `embed`; the model hands an object whose class
sets `rotates = True` to every attention core at build time (`rotary=`), and each attention
family calls `rotate` once per call, where its docstring says (softmax: before the scores; feature
maps: before the map; recurrences: after their own q, k transforms, before the recurrence). An
object whose class sets `biases = True` goes to every attention as `score_bias=`; only the
attentions that compute the scores q_i . k_j take it (their class sets `takes_score_bias = True`:
softmax and sliding window), and the model refuses any other (check_takes_score_bias).

A new kind is one subclass of Positions plus one line in POSITIONS.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from linarena.errors import ConfigError

ROPE_BASE = 10000.0


class UnknownPositionsError(ConfigError, ValueError):
    """model.positions names no kind of POSITIONS."""


class ScoreBiasRefusedError(ConfigError, ValueError):
    """model.positions adds a bias to the attention scores, and an attention computes none."""


class Positions(nn.Module):
    """A kind of position information; this base adds, rotates and biases nothing. Absolute
    kinds override `embed`, relative kinds `rotate` (and set `rotates = True`) or `score_bias`
    (and set `biases = True`).

    Args:
        d_model: the embedding's width.
        num_positions: positions a table must cover (the CLS position included).
    """

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


class NoPositions(Positions):
    """No position information: attention then sees the order only through its own structure
    (the causal mask, the decays and gates of the recurrences, cosFormer's distance weights)."""


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

    table_copies = 2  # the table, and one temporary of its size while it is computed

    def __init__(self, d_model: int, num_positions: int) -> None:
        super().__init__(d_model, num_positions)
        # Not persistent: it is a function of the shapes, so checkpoints need not carry it.
        self.register_buffer("table", sinusoidal_table(num_positions, d_model), persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table[offset : offset + x.shape[1]]


class LearnedPositions(Positions):
    """A trained table added to the embedding, initialised N(0, 0.02^2) (an nn.Embedding, so
    weight_decay_scope=matrices leaves it undecayed, as every embedding table)."""

    table_copies = 4  # weight, gradient and the two AdamW moments

    def __init__(self, d_model: int, num_positions: int) -> None:
        super().__init__(d_model, num_positions)
        self.table = nn.Embedding(num_positions, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table.weight[offset : offset + x.shape[1]]


def rotary_cos_sin(positions: Tensor, head_dim: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles p * theta_i, theta_i = ROPE_BASE^(-2i / head_dim) for the pairs
    i = 0 .. head_dim // 2 - 1 (RoFormer, eq. 15), for positions (n,): each (n, head_dim // 2)."""
    exponents = torch.arange(head_dim // 2, dtype=dtype, device=positions.device) * (-2 / head_dim)
    angles = positions.to(dtype)[:, None] * torch.pow(ROPE_BASE, exponents)
    return torch.cos(angles), torch.sin(angles)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (..., n, d) with the pairs (x_2i, x_2i+1) rotated by the angles of cos, sin (n, d // 2);
    an odd last dimension stays as it is (a pair of its own would have no partner)."""
    pairs = cos.shape[-1]
    even, odd = x[..., 0 : 2 * pairs : 2], x[..., 1 : 2 * pairs : 2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
    return rotated if 2 * pairs == x.shape[-1] else torch.cat([rotated, x[..., 2 * pairs :]], -1)


class RotaryPositions(Positions):
    """RoPE (RoFormer, Su et al. 2021): q and k of the token at position p have each pair of
    dimensions (2i, 2i+1) (interleaved pairs, as RoFormer writes it and RetNet rotates) turned by
    the angle p * theta_i, theta_i = 10000^(-2i / head_dim), so q_i . k_j depends on the
    positions through i - j only. Nothing is added to the embedding.

    The angles are computed in float32 (float64 for float64 inputs) and the rotated q, k cast
    back to the inputs' dtype.
    """

    rotates = True

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        cos, sin = rotary_cos_sin(positions, q.shape[-1], dtype)
        return (rotate_pairs(q.to(dtype), cos, sin).to(q.dtype),
                rotate_pairs(k.to(dtype), cos, sin).to(k.dtype))

    def extra_repr(self) -> str:
        return f"base={ROPE_BASE:g}, interleaved pairs"


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's slope m_h of each head h, in head order.

    heads a power of two: m_h = 2^(-8h / heads), h = 1 .. heads (the paper's geometric
    sequence: 1/2, 1/4, ..., 1/256 for 8 heads). Otherwise the rule of the paper's reference
    code (ofirpress/attention_with_linear_biases, get_slopes; fairseq's is the same): the slopes
    of the closest power of two p below, then every other slope of 2p (h = 1, 3, 5, ...) for
    the heads - p remaining heads, so that those interleave with the first p instead of
    repeating them.
    """
    if heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got {heads}.")
    power = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8 * h / power) for h in range(1, power + 1)]
    return slopes + [2.0 ** (-8 * h / (2 * power)) for h in range(1, 2 * power, 2)][
        : heads - power]


class AlibiPositions(Positions):
    """ALiBi (Press et al. 2022, "Train Short, Test Long"): head h adds -m_h * |i - j| to the
    score of query i and key j (alibi_slopes gives m_h), so that attention decays linearly with
    the distance, at a rate of its own per head; nothing is added to the embedding. Causal
    attention sees j <= i only, where the bias is -m_h * (i - j), as the paper writes it.

    The bias is computed in float32 (float64 for float64 scores) and cast to the scores' dtype:
    up to 8 heads the slopes are powers of two, so the float32 bias is exact up to 2^24
    positions.
    """

    biases = True

    def score_bias(self, queries: Tensor, keys: Tensor, heads: int, dtype: torch.dtype
                   ) -> Tensor:
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        slopes = torch.tensor(alibi_slopes(heads), dtype=wide, device=queries.device)
        distance = (queries[:, None] - keys[None, :]).abs().to(wide)  # (n_q, n_k)
        return (-slopes[:, None, None] * distance).to(dtype)

    def extra_repr(self) -> str:
        return "slopes 2^(-8h/heads)"


# The kinds model.positions may name, in the order the messages list them.
POSITIONS: dict[str, type[Positions]] = {
    "none": NoPositions,
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
}


def check_positions_kind(kind: object) -> str:
    """`kind` if POSITIONS has it, else UnknownPositionsError listing the kinds."""
    if not isinstance(kind, str) or kind not in POSITIONS:
        raise UnknownPositionsError(
            f"model.positions={kind!r} is not a kind of positions: use one of "
            f"{', '.join(POSITIONS)} (none: no positions; sinusoidal, learned: added to the "
            "embedding; rope: q and k rotated in every attention layer; alibi: a bias on the "
            "attention scores)."
        )
    return kind


def build_positions(kind: str, d_model: int, num_positions: int) -> Positions:
    """The object of model.positions=`kind` for an embedding of width d_model over
    num_positions positions."""
    return POSITIONS[check_positions_kind(kind)](d_model, num_positions)


# The attentions (conf/attention/ names) whose class sets takes_score_bias, i.e. that compute the
# scores q_i . k_j; a test checks this list against the conf directory.
SCORE_BIAS_ATTENTIONS = ("softmax", "swa")


def check_takes_score_bias(kind: str, takes: bool, attention: str) -> None:
    """ScoreBiasRefusedError, one line, when model.positions=`kind` biases the attention scores
    and `attention` (as the message names it, e.g. "attention=elu") computes none (`takes`
    False: a feature map, a recurrence or a whole layer has no score matrix to add it to)."""
    if POSITIONS[check_positions_kind(kind)].biases and not takes:
        raise ScoreBiasRefusedError(
            f"model.positions={kind} adds a bias to the attention scores, which {attention} "
            "does not compute (it has no score matrix); only "
            f"{' and '.join(f'attention={name}' for name in SCORE_BIAS_ATTENTIONS)} accept it "
            "(in a model.pattern, every entry must): pick one of those, or "
            "model.positions=rope (q and k rotated in every attention).")
