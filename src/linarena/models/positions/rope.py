"""model.positions=rope: q and k rotated by their positions in every attention layer (RoFormer,
Su et al. 2021)."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.models.positions.base import Positions

# RoFormer's base, the default of RotaryPositions.
ROPE_BASE = 10000.0


def rotary_cos_sin(positions: Tensor, head_dim: int, dtype: torch.dtype,
                   base: float = ROPE_BASE) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles p * theta_i, theta_i = base^(-2i / head_dim) for the pairs
    i = 0 .. head_dim // 2 - 1 (RoFormer, eq. 15), for positions (n,): each (n, head_dim // 2)."""
    exponents = torch.arange(head_dim // 2, dtype=dtype, device=positions.device) * (-2 / head_dim)
    angles = positions.to(dtype)[:, None] * torch.pow(base, exponents)
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
    the angle p * theta_i, theta_i = base^(-2i / head_dim), so q_i . k_j depends on the
    positions through i - j only. Nothing is added to the embedding.

    The angles are computed in float32 (float64 for float64 inputs) and the rotated q, k cast
    back to the inputs' dtype.

    Args:
        d_model, num_positions: as for every kind (unused: the rotation needs no table).
        base: the base of the angles, RoFormer's 10000 by default; a larger one turns the
            slowest pairs more slowly, for longer contexts.
    """

    name = "rope"
    description = "q and k rotated in every attention layer"

    rotates = True

    def __init__(self, d_model: int, num_positions: int, base: float = ROPE_BASE) -> None:
        super().__init__(d_model, num_positions)
        if not base > 0:
            raise ValueError(f"RoPE's base must be positive, got {base}.")
        self.base = float(base)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        cos, sin = rotary_cos_sin(positions, q.shape[-1], dtype, self.base)
        return (rotate_pairs(q.to(dtype), cos, sin).to(q.dtype),
                rotate_pairs(k.to(dtype), cos, sin).to(k.dtype))

    def extra_repr(self) -> str:
        return f"base={self.base:g}, interleaved pairs"
