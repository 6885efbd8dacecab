"""Writing results into reused buffers, in eager mode and under torch.compile.

The kernels work chunk by chunk, and a fresh multi-MB tensor per chunk is slow on CPU: the
allocator hands freed memory back to the OS between chunks, and every page of the next tensor
faults in again (1.2x at 16K tokens for cosFormer). So the largest per-chunk tensors live in
buffers reused from chunk to chunk (Scratch), written with `out=` (write_into).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor


class Scratch:
    """Named buffers, reused from chunk to chunk of one attention call."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], Tensor] = {}

    def __call__(self, name: str, like: Tensor, *shape: int) -> Tensor:
        """An uninitialised (shape) tensor of like's dtype and device in the buffer `name`
        (grown when too small): valid until the next call with this name, dtype and device.
        Keyed by dtype and device too, so one call's features can be recomputed in another
        precision (a float64 replay of saved float32 inputs) without sharing memory."""
        size = math.prod(shape)
        key = (name, like.dtype, like.device)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < size:
            buffer = self._buffers[key] = like.new_empty(size)
        return buffer[:size].view(shape)


def write_into(out: Tensor, op: Callable[..., Tensor], *args, **kwargs) -> Tensor:
    """op(*args, **kwargs, out=out), returning `out` (a buffer, or a view such as one chunk's rows
    of a full-length tensor): no temporary and no copy in eager mode. torch.compile rejects `out=`
    views and plans its own buffers, so there it is the op followed by a copy, which it fuses."""
    if torch.compiler.is_compiling():
        return out.copy_(op(*args, **kwargs))
    return op(*args, **kwargs, out=out)
