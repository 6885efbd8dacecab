"""What both ops share: input checks, padding, dtypes, and the chunk layout.

Checks that would need a GPU sync (gate and beta ranges) are asynchronous asserts: the error
surfaces at the next synchronisation on CUDA, at once on CPU, and torch.compile traces them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.validation import empty_output


@dataclass
class OpInputs:
    """Checked inputs, padded positions neutral (zero q, k, v and beta, log gate 0).

    q, k: (batch, heads, n, k_dim); v: (batch, heads, n, v_dim); log_gate: (batch, heads, n, g)
    with g = 1 (one gate per head, or none: zeros) or k_dim; beta: (batch, heads, n) or None;
    initial_state: (batch, heads, k_dim, v_dim) or None.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    log_gate: Tensor
    beta: Tensor | None
    initial_state: Tensor | None
    scale: float

    def to(self, dtype: torch.dtype) -> OpInputs:
        def cast(x: Tensor | None) -> Tensor | None:
            return None if x is None else x.to(dtype)

        return OpInputs(cast(self.q), cast(self.k), cast(self.v), cast(self.log_gate),
                        cast(self.beta), cast(self.initial_state), self.scale)


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32: half-precision inputs never accumulate a
    state in half precision."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast off: inside, the ops compute in the dtype they cast to."""
    return torch.autocast(device_type=device.type, enabled=False)


def _check_float(name: str, label: str, t: Tensor) -> None:
    if not t.is_floating_point():
        raise TypeError(f"{name}: {label} must be a floating-point tensor, got dtype {t.dtype}. "
                        f"Convert it with {label}.float().")


def prepare(
    name: str, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor | None, beta: Tensor | None,
    *, causal: bool, scale: float | None, mask: Tensor | None, initial_state: Tensor | None,
    return_state: bool, per_feature_gate: bool, chunk_size: int, backend: str,
) -> OpInputs:
    """Check the op's arguments (one-line errors), all of them before any is used (a call with
    no tokens returns before the backend runs), and neutralise padded positions with
    torch.where, so junk (NaN included) there reaches nothing."""
    if backend not in ("torch", "fla"):
        raise ValueError(f"{name}: backend must be 'torch' or 'fla', got {backend!r}.")
    if chunk_size < 1:
        raise ValueError(f"{name}: chunk_size must be >= 1, got {chunk_size}.")
    for label, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name}: {label} must have shape (batch, heads, n, dim), "
                             f"got {tuple(t.shape)}.")
        _check_float(name, label, t)
    if q.shape != k.shape or q.shape[:3] != v.shape[:3]:
        raise ValueError(f"{name}: q and k must have one shape (batch, heads, n, k_dim) and v "
                         f"(batch, heads, n, v_dim), got q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}.")
    batch, heads, length, k_dim = q.shape
    if k_dim == 0:
        raise ValueError(f"{name}: k_dim must be at least 1, got q {tuple(q.shape)} and k "
                         f"{tuple(k.shape)} (batch, heads, n, k_dim): with no key features "
                         "there is no attention, and no default scale k_dim ** -0.5.")
    per_head = (batch, heads, length)
    if log_gate is None:
        log_gate = q.new_zeros(*per_head, 1)
    else:
        _check_float(name, "log_gate", log_gate)
        allowed = [per_head, (*per_head, k_dim)] if per_feature_gate else [per_head]
        if tuple(log_gate.shape) not in allowed:
            raise ValueError(f"{name}: log_gate must have shape "
                             f"{' or '.join(str(s) for s in allowed)}, got {tuple(log_gate.shape)}.")
        log_gate = log_gate[..., None] if log_gate.dim() == 3 else log_gate
    if beta is not None:
        _check_float(name, "beta", beta)
        if tuple(beta.shape) != per_head:
            raise ValueError(f"{name}: beta must have shape (batch, heads, n) = {per_head}, "
                             f"got {tuple(beta.shape)}.")
    if not causal and (initial_state is not None or return_state):
        raise ValueError(f"{name}: initial_state and return_state need causal=True (a "
                         "bidirectional pass has no single state to hand on).")
    if initial_state is not None:
        _check_float(name, "initial_state", initial_state)
        expected = (batch, heads, k_dim, v.shape[-1])
        if tuple(initial_state.shape) != expected:
            raise ValueError(f"{name}: initial_state must have shape (batch, heads, k_dim, v_dim) "
                             f"= {expected}, got {tuple(initial_state.shape)}.")
    if mask is not None:
        if mask.dtype != torch.bool or tuple(mask.shape) != (batch, length):
            raise ValueError(f"{name}: mask must be a bool tensor of shape (batch, n) = "
                             f"({batch}, {length}), True for real tokens; got {mask.dtype} "
                             f"{tuple(mask.shape)}.")
        real = mask[:, None, :, None]
        q, k, v = (torch.where(real, x, 0.0) for x in (q, k, v))
        log_gate = torch.where(real, log_gate, 0.0)
        beta = None if beta is None else torch.where(real[..., 0], beta, 0.0)
    torch._assert_async(((log_gate <= 0) & torch.isfinite(log_gate)).all(),
                        f"{name}: log_gate must be finite and <= 0 (log of a gate in (0, 1]).")
    if beta is not None:
        torch._assert_async(((beta >= 0) & (beta <= 1)).all(),
                            f"{name}: beta must lie in [0, 1].")
    scale = k_dim ** -0.5 if scale is None else scale
    return OpInputs(q, k, v, log_gate, beta, initial_state, scale)


def no_tokens(
    inputs: OpInputs, like: Tensor, return_state: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """The result of a call with n = 0, which has nothing to compute (a chunked pass needs a
    token): out (batch, heads, 0, v_dim) in like's (v's) dtype, and with return_state the state
    unchanged, in the compute dtype: initial_state, or zeros (batch, heads, k_dim, v_dim)."""
    out = empty_output(like)
    if not return_state:
        return out
    dtype = compute_dtype(inputs.q, inputs.k, inputs.v)
    if inputs.initial_state is not None:
        return out, inputs.initial_state.to(dtype)
    batch, heads, _, k_dim = inputs.q.shape
    return out, inputs.q.new_zeros(batch, heads, k_dim, like.shape[-1], dtype=dtype)


def to_chunks(x: Tensor, chunk_size: int) -> Tensor:
    """(batch, heads, n, ...) -> (batch, heads, n_chunks, chunk_size, ...), zero-padded at the
    end (a zero token with log gate 0 and beta 0 changes nothing)."""
    extra = (-x.shape[2]) % chunk_size
    if extra:
        pad = [0, 0] * (x.dim() - 3) + [0, extra]
        x = F.pad(x, pad)
    return x.unflatten(2, (-1, chunk_size))


def from_chunks(x: Tensor, length: int) -> Tensor:
    """(batch, heads, n_chunks, chunk_size, d) -> (batch, heads, length, d)."""
    return x.flatten(2, 3)[:, :, :length]


def reverse(inputs: OpInputs) -> OpInputs:
    """The sequence backwards, for the backward pass of a bidirectional op. Reversed step t is
    token i = n-1-t and gets the log gate g_{i+1} (0 for the first step), so that a strict-causal
    pass over it gives the state B_i: tokens j > i, decayed by exp(g_{i+1} + ... + g_j)."""
    q, k, v, beta = (None if x is None else x.flip(2)
                     for x in (inputs.q, inputs.k, inputs.v, inputs.beta))
    gate = inputs.log_gate.flip(2)
    gate = torch.cat([torch.zeros_like(gate[:, :, :1]), gate[:, :, :-1]], dim=2)
    return OpInputs(q, k, v, gate, beta, None, inputs.scale)


def causal_tril(size: int, strict: bool, device: torch.device) -> Tensor:
    """bool (size, size): key j visible from query i, j <= i (j < i when strict)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1 if strict else 0)


# (inputs, chunk_size, strict) -> (unscaled outputs, final state): an op's causal chunked pass.
ChunkedPass = Callable[[OpInputs, int, bool], tuple[Tensor, Tensor]]


def run_torch(inputs: OpInputs, chunked: ChunkedPass, chunk_size: int, causal: bool,
              like: Tensor, return_state: bool) -> Tensor | tuple[Tensor, Tensor]:
    """The torch backend of an op: its chunked pass in full precision, run forwards and, when
    bidirectional, strictly backwards on the reversed sequence (token i counts once); scaled and
    cast to `like`'s dtype (v's)."""
    dtype = compute_dtype(inputs.q, inputs.k, inputs.v)
    with full_precision(inputs.q.device):
        inputs = inputs.to(dtype)
        out, state = chunked(inputs, chunk_size, False)
        if not causal:
            back, _ = chunked(reverse(inputs), chunk_size, True)
            out = out + back.flip(2)
    out = (inputs.scale * out).to(like.dtype)
    return (out, state) if return_state else out
