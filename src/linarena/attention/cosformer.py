"""cosFormer attention (Qin et al. 2022): relu features with a cos re-weighting by distance."""

from __future__ import annotations

from linarena.attention.linear import LinearAttention
from linarena.attention.maps.cosformer import CosformerFeatures
from linarena.attention.rotation import Rotation


class CosformerAttention(LinearAttention):
    """LinearAttention with weight relu(q_i) . relu(k_j) * cos(pi/2 * (i - j) / M)
    (CosformerFeatures, which says how M is chosen in each mode).

    Args:
        max_length: M in causal mode (required there); ignored when bidirectional.
        head_dim, causal, eps, chunk_size, backend, rotary: see LinearAttention.
    """

    def __init__(
        self,
        head_dim: int,
        causal: bool = False,
        max_length: int | None = None,
        eps: float = 1e-6,
        chunk_size: int = 64,
        backend: str = "auto",
        rotary: Rotation | None = None,
    ) -> None:
        super().__init__(head_dim, causal, feature_map=CosformerFeatures(max_length), eps=eps,
                         chunk_size=chunk_size, backend=backend, rotary=rotary)

    @property
    def max_length(self) -> int | None:
        return self.feature_map.max_length
