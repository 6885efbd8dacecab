"""Input checks shared by every attention module, so a wrong call fails with a message that says
what was expected instead of a shape error deep inside a matmul."""

from __future__ import annotations

import torch
from torch import Tensor


def check_attention_inputs(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, head_dim: int, name: str
) -> None:
    """Check q, k, v of shape (batch, heads, length, head_dim) and a bool (batch, length) mask."""
    for label, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"{name}: {label} must have shape (batch, heads, length, head_dim), "
                f"got {tuple(t.shape)} ({t.dim()} dims)."
            )
    if q.shape[:3] != k.shape[:3] or q.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"{name}: q, k and v must share (batch, heads, length), got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}."
        )
    if q.shape[-1] != head_dim or k.shape[-1] != head_dim:
        raise ValueError(
            f"{name}: the module was built with head_dim={head_dim} but q has last dim "
            f"{q.shape[-1]} and k {k.shape[-1]}. Build it with head_dim=d_model // num_heads."
        )
    if mask is None:
        return
    batch, _, length, _ = q.shape
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name}: mask must be a bool tensor (True for real tokens), got dtype {mask.dtype}. "
            "Convert it with mask.bool()."
        )
    if tuple(mask.shape) != (batch, length):
        raise ValueError(
            f"{name}: mask must have shape (batch, length) = ({batch}, {length}), "
            f"got {tuple(mask.shape)}."
        )



def check_right_padded(mask: Tensor, name: str) -> None:
    """Refuse a key-padding mask (batch, length) that is not right-padded (a False followed by a
    True). An asynchronous assert: no GPU sync on CUDA (the error surfaces at a later
    synchronisation), and torch.compile traces it."""
    torch._assert_async(
        (mask[:, 1:] <= mask[:, :-1]).all(),
        f"{name}: the mask must be right-padded (real tokens first, then padding); causal "
        "attention drops the key mask and relies on it. Pad sequences on the right.",
    )
