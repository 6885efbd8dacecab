"""Linear Transformer attention (Katharopoulos et al. 2020, "Transformers are RNNs")."""

from __future__ import annotations

from linarena.attention.linear import LinearAttention
from linarena.attention.maps.elu import EluFeatures
from linarena.attention.rotation import Rotation


class EluAttention(LinearAttention):
    """LinearAttention with phi(x) = elu(x) + 1 applied to the raw q and k (EluFeatures).

    Args: head_dim, causal, eps, chunk_size, backend, rotary: see LinearAttention.
    """

    def __init__(
        self, head_dim: int, causal: bool = False, eps: float = 1e-6, chunk_size: int = 64,
        backend: str = "auto", rotary: Rotation | None = None,
    ) -> None:
        super().__init__(head_dim, causal, feature_map=EluFeatures(), eps=eps,
                         chunk_size=chunk_size, backend=backend, rotary=rotary)
