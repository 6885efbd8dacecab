"""Input checks shared by every attention module, so a wrong call fails with a message that says
what was expected instead of a shape error deep inside a matmul, and the padding rule every
module applies."""

from __future__ import annotations

import torch
from torch import Tensor


def check_head_dim(head_dim: int, name: str) -> None:
    """Refuse a head_dim that is not a positive integer."""
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"{name}: head_dim must be a positive integer, got {head_dim!r}.")


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
        if not t.is_floating_point():
            raise ValueError(
                f"{name}: {label} must be a floating-point tensor, got dtype {t.dtype} "
                "(attention outputs are weighted means, not integers). Convert it with .float()."
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


def zero_padding(x: Tensor, mask: Tensor | None) -> Tensor:
    """x (batch, heads, length, dim), or a token representation (batch, length, d_model), with
    padded positions set to 0 by torch.where, before x enters any computation: what a padded
    query, key, value or token holds (NaN, inf, junk) then reaches no real output and no
    gradient. Masking later by a product would not do: 0 * NaN is NaN, and the backward pass of
    a padded query's output multiplies a zero gradient by that query's NaN weights, which the
    real keys' and values' gradients sum over."""
    if mask is None:
        return x
    real = mask[:, None, :, None] if x.dim() == 4 else mask[:, :, None]
    return torch.where(real, x, 0.0)


def empty_output(v: Tensor) -> Tensor:
    """The output of a call with no tokens: (batch, heads, 0, d_v), v's shape and dtype. A copy of
    (empty) v rather than new zeros, so it stays in v's autograd graph and a backward through it
    runs as through any call's."""
    return v.clone()


def check_state(made_by: str | None, tensor: Tensor, key: str, shape: dict[str, int],
                dtype: torch.dtype, name: str) -> None:
    """Refuse a recurrent state made by another layer (`made_by`, the key the layer that made
    it recorded, against this layer's `key`), or whose `tensor` has another shape than `shape`
    (dimension name -> size, e.g. batch, heads, ...) or another dtype."""
    if made_by != key:
        raise ValueError(f"{name}: the state was made by {made_by or 'an unknown layer'}, "
                         f"this layer is {key}; pass the state this layer returned.")
    differ = [f"{label} {got} != {expected}" for (label, expected), got
              in zip(shape.items(), tensor.shape, strict=True) if got != expected]
    if differ:
        raise ValueError(f"{name}: the state does not fit this call ({', '.join(differ)}: "
                         "state vs inputs); pass the state returned for this batch.")
    if tensor.dtype != dtype:
        raise ValueError(f"{name}: the state is {tensor.dtype} but this call computes in "
                         f"{dtype}; continue in the dtype the state was made in.")


def check_right_padded(mask: Tensor, name: str) -> None:
    """Refuse a key-padding mask (batch, length) that is not right-padded (a False followed by a
    True). An asynchronous assert: no GPU sync on CUDA (the error surfaces at a later
    synchronisation), and torch.compile traces it."""
    torch._assert_async(
        (mask[:, 1:] <= mask[:, :-1]).all(),
        f"{name}: the mask must be right-padded (real tokens first, then padding); causal "
        "attention drops the key mask and relies on it. Pad sequences on the right.",
    )
