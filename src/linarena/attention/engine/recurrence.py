"""What the recurrences' ops (gated/, delta/) share: input checks, padding, dtypes, the backend
branch (run_op), the frame of a one-token step (run_step), and the chunk layout.

Checks that would need a GPU sync (gate and beta ranges) are asynchronous asserts: the error
surfaces at the next synchronisation on CUDA, at once on CPU, and torch.compile traces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.engine.common import compute_dtype, full_precision, tokens_per_chunk
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
                             f"{' or '.join(str(s) for s in allowed)}, "
                             f"got {tuple(log_gate.shape)}.")
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
    # A convention check (a gate passed where its log belongs, a gate of exactly 0), not a NaN
    # check: NaN gates come from NaN weights, as NaN q, k, v do, and go through to the loss, where
    # training reports the divergence (checkpoint_guard) instead of failing here.
    torch._assert_async(~((log_gate > 0) | torch.isinf(log_gate)).any(),
                        f"{name}: log_gate must be finite and <= 0 (log of a gate in (0, 1]).")
    if beta is not None:
        torch._assert_async(~((beta < 0) | (beta > 1)).any(),
                            f"{name}: beta must lie in [0, 1].")
    scale = k_dim ** -0.5 if scale is None else scale
    return OpInputs(q, k, v, log_gate, beta, initial_state, scale)


def _start_state(inputs: OpInputs, dtype: torch.dtype) -> Tensor:
    """The state before the call's first token in `dtype`: initial_state, or zeros (batch, heads,
    k_dim, v_dim)."""
    if inputs.initial_state is not None:
        return inputs.initial_state.to(dtype)
    batch, heads, _, k_dim = inputs.q.shape
    return inputs.q.new_zeros(batch, heads, k_dim, inputs.v.shape[-1], dtype=dtype)


def no_tokens(
    inputs: OpInputs, like: Tensor, return_state: bool
) -> Tensor | tuple[Tensor, Tensor]:
    """The result of a call with n = 0, which has nothing to compute (a chunked pass needs a
    token): out (batch, heads, 0, v_dim) in like's (v's) dtype, and with return_state the state
    unchanged, in the compute dtype: initial_state, or zeros (batch, heads, k_dim, v_dim)."""
    out = empty_output(like)
    if not return_state:
        return out
    return out, _start_state(inputs, compute_dtype(inputs.q, inputs.k, inputs.v))


@dataclass(frozen=True)
class Pass:
    """One pass of a chunked engine over a (batch, heads, n, .) tensor: chunks of `size` tokens
    of the sequence, or of the sequence reversed (the second pass of a bidirectional call).

    Reversed pass position t reads token n - 1 - t, and for the log gates (gate=True) token
    n - t: step t of the reversed recurrence decays by the gate of the token after it, step 0 by
    none. Positions with no token read as zeros: a zero token with log gate 0 and beta 0 changes
    nothing, so blocks are padded with them.
    """

    length: int
    size: int
    reverse: bool

    def _span(self, lo: int, hi: int, gate: bool) -> tuple[int, int, int, int]:
        """(first, end) token of the sequence and (first, end) position in the flattened block
        of chunks lo..hi that they fill."""
        first, end = lo * self.size, min(hi * self.size, self.length)
        if not self.reverse:
            return first, end, 0, end - first
        shift = int(gate)
        t_lo = max(first, shift)
        return self.length - end + shift, self.length - t_lo + shift, t_lo - first, end - first

    def read(self, x: Tensor, lo: int, hi: int, gate: bool = False) -> Tensor:
        """Chunks lo..hi of x as a contiguous (batch, heads, hi - lo, size, .) tensor."""
        a, b, p_lo, p_hi = self._span(lo, hi, gate)
        block = x[:, :, a:b].flip(2) if self.reverse else x[:, :, a:b].contiguous()
        pad = (hi - lo) * self.size - p_hi
        if p_lo or pad:
            block = F.pad(block, [0, 0] * (x.dim() - 3) + [p_lo, pad])
        return block.unflatten(2, (hi - lo, self.size))

    def write(self, target: Tensor, block: Tensor, lo: int, hi: int, gate: bool = False,
              add: bool = False) -> None:
        """Store (add: add) a (batch, heads, hi - lo, size, .) block into the tokens of target
        (batch, heads, n, .) it was read from."""
        a, b, p_lo, p_hi = self._span(lo, hi, gate)
        values = block.flatten(2, 3)[:, :, p_lo:p_hi]
        values = values.flip(2) if self.reverse else values
        if add:
            target[:, :, a:b] += values
        else:
            target[:, :, a:b] = values

    @property
    def chunks(self) -> int:
        return -(-self.length // self.size)

    def blocks(self, like: Tensor, width: int) -> list[tuple[int, int]]:
        """(lo, hi) chunks of each block (see block_bounds)."""
        return block_bounds(self.chunks, self.size, like, width)


def passes(length: int, size: int, causal: bool) -> list[Pass]:
    """The passes of a call: forwards, and when bidirectional strictly backwards too."""
    return [Pass(length, size, False)] + ([] if causal else [Pass(length, size, True)])


# A block's tensors hold CHUNK_FLOATS / BLOCK_SHARE floats (1 MB in float32). Measured at 16K
# tokens on 2 cores, against 4 MB: as fast or faster, and the backward passes, which keep a few
# dozen of a block's tensors alive at once, need 50 to 115 MB less.
BLOCK_SHARE = 4


def block_bounds(chunks: int, size: int, like: Tensor, width: int) -> list[tuple[int, int]]:
    """(first, end) chunk of each block for a chunked pass: chunks of `size` tokens, as many as
    keep a block's (batch, heads, tokens, width) tensors within CHUNK_FLOATS / BLOCK_SHARE. A
    fresh tensor of the whole sequence is slow on CPU (tens of MB: every page faults in again);
    one of a block is not, and its elementwise passes work in cache."""
    per_block = tokens_per_chunk(like, width, size, BLOCK_SHARE) // size
    return [(lo, min(lo + per_block, chunks)) for lo in range(0, chunks, per_block)]


def reverse_cumsum(x: Tensor, dim: int) -> Tensor:
    """sum over t' >= t along dim: the gradient of a cumulative sum."""
    return x.flip(dim).cumsum(dim).flip(dim)


def causal_tril(size: int, strict: bool, device: torch.device) -> Tensor:
    """bool (size, size): key j visible from query i, j <= i (j < i when strict)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(-1 if strict else 0)


# (inputs, chunk_size, causal, gated) -> (scaled outputs, final state): an op's chunked engine,
# which adds a strict pass over the reversed sequence when bidirectional; gated=False skips the
# decay of a call without log gates.
ChunkedOp = Callable[[OpInputs, int, bool, bool], tuple[Tensor, Tensor]]


# fla's kernels for an op (backend.py): (inputs, *, gate_given, causal, return_state) -> result.
FlaOp = Callable[..., Tensor | tuple[Tensor, Tensor]]


def run_op(
    name: str, chunked: ChunkedOp, fla: FlaOp, q: Tensor, k: Tensor, v: Tensor,
    log_gate: Tensor | None, beta: Tensor | None, *, per_feature_gate: bool, causal: bool,
    scale: float | None, mask: Tensor | None, initial_state: Tensor | None, return_state: bool,
    chunk_size: int, backend: str,
) -> Tensor | tuple[Tensor, Tensor]:
    """An op (gated_linear_attention, delta_rule) on its backend, the arguments as the op's:
    prepare()'s checks, then fla's kernels (backend="fla") or the chunked engine in full
    precision (token i counts once when bidirectional), the output cast to v's dtype."""
    inputs = prepare(name, q, k, v, log_gate, beta, causal=causal, scale=scale, mask=mask,
                     initial_state=initial_state, return_state=return_state,
                     per_feature_gate=per_feature_gate, chunk_size=chunk_size, backend=backend)
    gated = log_gate is not None
    if q.shape[2] == 0:  # nothing to compute, on either backend (a chunked pass needs a token)
        return no_tokens(inputs, v, return_state)
    if backend == "fla":
        return fla(inputs, gate_given=gated, causal=causal, return_state=return_state)
    dtype = compute_dtype(inputs.q, inputs.k, inputs.v)
    with full_precision(q.device):
        out, state = chunked(inputs.to(dtype), min(chunk_size, q.shape[2]), causal, gated)
    out = out.to(v.dtype)
    return (out, state) if return_state else out


# (inputs of one token in the compute dtype, the state before it) -> the state after it.
StateUpdate = Callable[[OpInputs, Tensor], Tensor]


def run_step(
    name: str, update: StateUpdate, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor | None,
    beta: Tensor | None, *, per_feature_gate: bool, scale: float | None, mask: Tensor | None,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """One token of a causal op in closed form, the arguments as the op's with n = 1:
    prepare()'s checks and padding (a padded token has zero q, k, v and beta and log gate 0, so
    it leaves the state as it was and outputs 0), then in full precision S_t =
    update(inputs, S_{t-1}) (S_0: initial_state, zeros if None) and o_t = scale * S_t^T q_t.
    Returns out (batch, heads, 1, v_dim) in v's dtype and S_t (batch, heads, k_dim, v_dim) in
    the compute dtype, as the op with causal=True and return_state=True."""
    inputs = prepare(name, q, k, v, log_gate, beta, causal=True, scale=scale, mask=mask,
                     initial_state=initial_state, return_state=True,
                     per_feature_gate=per_feature_gate, chunk_size=1, backend="torch")
    if q.shape[2] != 1:
        raise ValueError(f"{name}: one token: q, k (batch, heads, 1, k_dim) and v (batch, heads, "
                         f"1, v_dim), got {q.shape[2]} tokens.")
    dtype = compute_dtype(inputs.q, inputs.k, inputs.v)
    with full_precision(q.device):
        token = inputs.to(dtype)
        state = update(token, _start_state(token, dtype))
        out = token.scale * (token.q @ state)
    return out.to(v.dtype), state
