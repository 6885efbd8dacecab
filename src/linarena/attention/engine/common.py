"""What every op of the engine shares: the dtype it computes in (never half precision), the
autocast it turns off, a finite "minus infinity", and the chunk budget. The feature-map kernels'
shared parts are linear/common.py's, the recurrences' recurrence.py's.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor


def lowest(dtype: torch.dtype) -> float:
    """A finite "minus infinity": exp() of it is 0 and differences of two of them are 0, not NaN."""
    return torch.finfo(dtype).min


# Floats in one chunk's features, batch x heads x tokens x m: 4 MB in float32, so that the
# elementwise passes over a chunk and its matmuls work in cache (measured: 2 and 8 MB are
# slower at 16K tokens on 2 cores).
CHUNK_FLOATS = 2**20


def tokens_per_chunk(like: Tensor, num_features: int, multiple: int = 1, share: int = 1) -> int:
    """Tokens of a chunk of CHUNK_FLOATS / share features for inputs `like` (batch, heads, n, .):
    a multiple of `multiple`, at least `multiple`."""
    batch, heads = like.shape[:2]
    fit = CHUNK_FLOATS // share // max(1, batch * heads * num_features)
    return max(multiple, fit // multiple * multiple)


def chunk_bounds(length: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of `size` tokens, the last one possibly shorter. Written over the
    chunk count, so that torch.compile specialises on the number of chunks, not on the length:
    one graph serves every length with the same chunk count."""
    count = (length + size - 1) // size
    return [(i * size, torch.sym_min((i + 1) * size, length)) for i in range(count)]


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32: half-precision inputs never accumulate a
    state in half precision."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off: inside, the ops compute in the dtype they cast to."""
    return torch.autocast(device_type=device.type, enabled=False)
