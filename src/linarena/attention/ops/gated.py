"""Gated linear attention: a linear-attention state with a decay per head or per key feature."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from linarena.attention.ops.common import (
    OpInputs,
    causal_tril,
    from_chunks,
    no_tokens,
    prepare,
    run_torch,
    to_chunks,
)

# Per-feature gates: the diagonal blocks of a chunk hold an explicit (c, c, k_dim) decay tensor,
# so c is kept small; blocks between sub-chunks use a factorised decay (see _intra_chunk).
SUB_CHUNK = 16


def gated_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor | None = None, *, causal: bool,
    scale: float | None = None, mask: Tensor | None = None, initial_state: Tensor | None = None,
    return_state: bool = False, chunk_size: int = 64, backend: str = "torch",
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention whose state decays by a gate at every token. No denominator.

    q, k: (batch, heads, n, k_dim), k_dim >= 1; v: (batch, heads, n, v_dim); log_gate: None (no
    decay), (batch, heads, n) (one gate per head) or (batch, heads, n, k_dim) (one per key
    feature), finite values <= 0 (checked asynchronously); scale: defaults to k_dim ** -0.5;
    mask: bool (batch, n), True for real tokens: a padded token changes no real output and does
    not enter the state (its q, k, v are zeroed and its gate set to 1 before anything, with
    torch.where, so NaN there is harmless); its own output is 0.

    Causal: S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale * S_t^T q_t, S_0 =
    initial_state (zeros if None). Bidirectional: o_i = scale * (F_i^T q_i + B_i^T q_i), with
    F_i the causal state after token i and B_i the state of the same recurrence run backwards
    from the last token, at position i before it absorbs token i (stepping back from l+1 to l
    decays by exp(g_{l+1})). Token i counts once, and o_i = scale * sum_j (q_i * k_j * D_ij) . v_j
    with D_ij = exp(g_{min(i,j)+1} + ... + g_{max(i,j)}), D_ii = 1.

    Computed by chunks of `chunk_size` tokens: exact attention with the decay matrix inside a
    chunk, the state carried across chunks; the backward pass of a bidirectional call is a
    strict-causal pass over the reversed sequence. Memory for autograd is O(n): one state per
    chunk; with per-feature gates, the intra-chunk part is recomputed in the backward pass
    (torch.utils.checkpoint) instead of keeping its (16, 16, k_dim) decay tensors.

    Dtypes: float64 inputs are computed in float64; anything else in float32 with autocast
    off, the output cast back to v's dtype. Returns out (batch, heads, n, v_dim), and with
    return_state=True (causal only) also the final state (batch, heads, k_dim, v_dim) in the
    compute dtype, which initial_state of a next call continues from exactly; n = 0 gives an
    empty out and the initial state (zeros if None). backend="fla":
    fla-core's Triton kernels (causal, CUDA; see linarena.attention.ops.fla).
    """
    name = "gated_linear_attention"
    inputs = prepare(name, q, k, v, log_gate, None, causal=causal, scale=scale, mask=mask,
                     initial_state=initial_state, return_state=return_state,
                     per_feature_gate=True, chunk_size=chunk_size, backend=backend)
    if q.shape[2] == 0:  # nothing to compute, on either backend (a chunked pass needs a token)
        return no_tokens(inputs, v, return_state)
    if backend == "fla":
        from linarena.attention.ops import fla

        return fla.gated_linear_attention_fla(inputs, gate_given=log_gate is not None,
                                              causal=causal, return_state=return_state)
    return run_torch(inputs, _chunked, chunk_size, causal, v, return_state)


def _chunked(inputs: OpInputs, chunk_size: int, strict: bool) -> tuple[Tensor, Tensor]:
    """Unscaled sum_{j <= i} (q_i * k_j * D_ij) . v_j (j < i when strict) plus the initial
    state's part, and the final state."""
    q, k, v, gate = inputs.q, inputs.k, inputs.v, inputs.log_gate
    batch, heads, length, k_dim = q.shape
    size = min(chunk_size, length)
    qc, kc, vc = (to_chunks(x, size) for x in (q, k, v))
    cum = to_chunks(gate, size).cumsum(dim=3)  # (b, h, chunks, c, g), relative to the chunk
    last = cum[:, :, :, -1:]  # the chunk's total log decay
    if cum.shape[-1] == 1:
        intra = _intra_chunk(qc, kc, vc, cum, strict)
    else:
        # Recomputed in the backward pass: autograd would keep about 24 k_dim floats a token
        # (decay tensors of the sub-chunks), instead of q, k, v and the gates alone.
        intra = checkpoint(_intra_chunk, qc, kc, vc, cum, strict, use_reentrant=False)
    # The state of one chunk's keys at its end, and the decay of the state through the chunk.
    added = (kc * torch.exp(last - cum)).transpose(-1, -2) @ vc  # (b, h, chunks, k_dim, v_dim)
    decay = torch.exp(last).transpose(-1, -2)  # (b, h, chunks, g, 1)
    state = inputs.initial_state
    if state is None:
        state = q.new_zeros(batch, heads, k_dim, v.shape[-1])
    before = []
    # unbind, not decay[:, :, i]: the backward of an index writes a full-size gradient per chunk
    # (quadratic in length), unbind's stacks the chunks' gradients once.
    for decay_i, added_i in zip(decay.unbind(2), added.unbind(2), strict=True):
        before.append(state)
        state = decay_i * state + added_i
    inter = (qc * torch.exp(cum)) @ torch.stack(before, dim=2)
    return from_chunks(intra + inter, length), state


def _sub_chunk(chunk: int, gate_width: int) -> int:
    """Sub-chunk size: the whole chunk for per-head gates (the decay is a (c, c) matrix), else
    the largest divisor of the chunk up to SUB_CHUNK."""
    if gate_width == 1:
        return chunk
    return max(d for d in range(1, min(chunk, SUB_CHUNK) + 1) if chunk % d == 0)


def _intra_chunk(q: Tensor, k: Tensor, v: Tensor, cum: Tensor, strict: bool) -> Tensor:
    """sum over keys j of the same chunk, j <= i (j < i when strict), of (q_i * k_j * D_ij) . v_j
    with D_ij = exp(cum_i - cum_j). Shapes (b, h, chunks, c, .).

    Exact and without overflow: inside a sub-chunk, D is an explicit tensor of exponents <= 0.
    For keys in earlier sub-chunks, D_ij = exp(cum_i - cum_r) * exp(cum_r - cum_j) with r the
    last token before the query's sub-chunk: both exponents <= 0.
    """
    chunk, width = cum.shape[-2], cum.shape[-1]
    sub = _sub_chunk(chunk, width)
    parts = chunk // sub
    qs, ks, vs, cs = (x.unflatten(-2, (parts, sub)) for x in (q, k, v, cum))
    out = _diagonal_blocks(qs, ks, vs, cs, strict)
    if parts > 1:
        ref = torch.cat([torch.zeros_like(cs[..., :1, -1, :]), cs[..., :-1, -1, :]], dim=-2)
        q_ref = qs * torch.exp(cs - ref[..., None, :])  # (b, h, chunks, parts, sub, k_dim)
        earlier = torch.arange(chunk, device=q.device) < sub * torch.arange(parts, device=q.device)[:, None]
        gap = torch.where(earlier[..., None], ref[..., :, None, :] - cum[..., None, :, :], -torch.inf)
        k_ref = k[..., None, :, :] * torch.exp(gap)  # (b, h, chunks, parts, chunk, k_dim)
        out = out + (q_ref @ k_ref.transpose(-1, -2)) @ v[..., None, :, :]
    return out.flatten(-3, -2)


def _diagonal_blocks(q: Tensor, k: Tensor, v: Tensor, cum: Tensor, strict: bool) -> Tensor:
    """The part of _intra_chunk between tokens of one sub-chunk, with the explicit decay tensor.
    Shapes (b, h, chunks, parts, sub, .)."""
    visible = causal_tril(q.shape[-2], strict, q.device)[..., None]
    gap = torch.where(visible, cum[..., :, None, :] - cum[..., None, :, :], -torch.inf)
    decay = torch.exp(gap)  # (b, h, chunks, parts, sub, sub, g)
    if cum.shape[-1] == 1:
        scores = (q @ k.transpose(-1, -2)) * decay[..., 0]
    else:
        scores = (q[..., :, None, :] * k[..., None, :, :] * decay).sum(dim=-1)
    return scores @ v
