"""Writing results into preallocated buffers, in eager mode and under torch.compile.

The kernels reuse one buffer per chunk and write straight into slices of their outputs with
`out=`, which saves a temporary and a copy per op in eager mode. torch.compile rejects `out=`
tensors that are strided views and plans its own buffers anyway, so there the same write is an
ordinary op followed by a copy, which it fuses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def write_into(out: Tensor, op: Callable[..., Tensor], *args) -> Tensor:
    """op(*args, out=out), returning `out` (any shape-compatible view of a buffer)."""
    if torch.compiler.is_compiling():
        return out.copy_(op(*args))
    return op(*args, out=out)


def rows(buffer: Tensor | None, count: int) -> Tensor | None:
    """The first `count` rows (dim 2) of a per-chunk buffer (batch, heads, chunk, width), or
    None."""
    return None if buffer is None else buffer[:, :, :count]
