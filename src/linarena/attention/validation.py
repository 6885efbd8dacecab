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
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, head_dim: int, name: str,
    v_is_head_dim: bool = False,
) -> None:
    """Check q, k, v of shape (batch, heads, length, head_dim) and a bool (batch, length) mask;
    v may be of another width unless `v_is_head_dim` (a module whose state is head_dim wide in
    the values too)."""
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
    if v_is_head_dim and v.shape[-1] != head_dim:
        raise ValueError(
            f"{name}: v must have last dim head_dim={head_dim} (the width of q and k), got "
            f"{v.shape[-1]}: this module keeps a head_dim x head_dim state per head."
        )
    if mask is None:
        return
    batch, _, length, _ = q.shape
    check_mask_dtype(mask, name)
    if tuple(mask.shape) != (batch, length):
        raise ValueError(
            f"{name}: mask must have shape (batch, length) = ({batch}, {length}), "
            f"got {tuple(mask.shape)}."
        )


def check_mask_dtype(mask: Tensor, name: str) -> None:
    """Refuse a mask that is not bool: a 0/1 mask or an additive one (0 keep, -inf pad) read as
    bool would keep the padding or invert it."""
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name}: mask must be a bool tensor (True for real tokens), got dtype {mask.dtype}. "
            "Convert a 0/1 mask with mask.bool(), an additive one (0 keep, -inf pad) with "
            "mask == 0."
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


def check_state_kind(state: object, kind: type, name: str) -> None:
    """Refuse a state of another kind of module than `kind` (e.g. a recurrence's state given to
    a feature-map attention), before its fields are read."""
    if not isinstance(state, kind):
        raise ValueError(f"{name}: the state is a {type(state).__name__}, this layer takes a "
                         f"{kind.__name__}; pass the state this layer returned.")


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
