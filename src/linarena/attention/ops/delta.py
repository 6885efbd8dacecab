"""The delta rule (DeltaNet), optionally gated per head (Gated DeltaNet), in its WY / UT form."""

from __future__ import annotations

import torch
from torch import Tensor

from linarena.attention.ops.common import (
    OpInputs,
    causal_tril,
    from_chunks,
    no_tokens,
    prepare,
    run_torch,
    to_chunks,
)


def delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_gate: Tensor | None = None, *,
    causal: bool, scale: float | None = None, mask: Tensor | None = None,
    initial_state: Tensor | None = None, return_state: bool = False, chunk_size: int = 64,
    backend: str = "torch",
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention whose state is rewritten by the delta rule at every token.

    q, k: (batch, heads, n, k_dim), k_dim >= 1; v: (batch, heads, n, v_dim); beta: (batch,
    heads, n) in [0, 1]; log_gate: None or (batch, heads, n), one gate per head, finite values
    <= 0 (beta and gate ranges checked asynchronously); scale: defaults to k_dim ** -0.5; mask:
    bool (batch, n), True for real tokens: a padded token changes no real output and does not
    enter the state (its q, k, v and beta are zeroed and its gate set to 1 first, with
    torch.where, so NaN there is harmless); its own output is 0.

    Causal: S_t = exp(g_t) S_{t-1}; u_t = beta_t (v_t - S_t^T k_t); S_t += k_t u_t^T;
    o_t = scale * S_t^T q_t, S_0 = initial_state (zeros if None). Bidirectional:
    o_i = scale * (F_i^T q_i + B_i^T q_i), with F_i the causal state after token i and B_i the
    state of the same recurrence run backwards from the last token, at position i before it
    absorbs token i (stepping back from l+1 to l decays by exp(g_{l+1})): token i counts once.

    Computed by chunks of `chunk_size` tokens in the WY / UT form: per chunk,
    T = (I + tril(diag(beta) (Gamma * K K^T), -1))^-1 diag(beta) by a unit-triangular solve
    (Gamma_ts = exp(G_t - G_s), G the log gates summed from the chunk's start), W = T diag(exp(G))
    K and U = T V, so the chunk's updates are U - W S_0 given the state S_0 at its start.
    Memory for autograd is O(n): one state per chunk, never one per token.

    Dtypes: float64 inputs are computed in float64; anything else in float32 with autocast
    off, the output cast back to v's dtype. Returns out (batch, heads, n, v_dim), and with
    return_state=True (causal only) also the final state (batch, heads, k_dim, v_dim) in the
    compute dtype; n = 0 gives an empty out and the initial state (zeros if None).
    backend="fla": fla-core's Triton kernels (causal, CUDA; see
    linarena.attention.ops.fla).
    """
    name = "delta_rule"
    inputs = prepare(name, q, k, v, log_gate, beta, causal=causal, scale=scale, mask=mask,
                     initial_state=initial_state, return_state=return_state,
                     per_feature_gate=False, chunk_size=chunk_size, backend=backend)
    if q.shape[2] == 0:  # nothing to compute, on either backend (a chunked pass needs a token)
        return no_tokens(inputs, v, return_state)
    if backend == "fla":
        from linarena.attention.ops import fla

        return fla.delta_rule_fla(inputs, gate_given=log_gate is not None, causal=causal,
                                  return_state=return_state)
    return run_torch(inputs, _chunked, chunk_size, causal, v, return_state)


def _chunked(inputs: OpInputs, chunk_size: int, strict: bool) -> tuple[Tensor, Tensor]:
    """Unscaled outputs S_t^T q_t (strict: the state after the decay of step t, before token t
    is absorbed) and the final state."""
    q, k, v, beta = inputs.q, inputs.k, inputs.v, inputs.beta
    batch, heads, length, k_dim = q.shape
    size = min(chunk_size, length)
    qc, kc, vc = (to_chunks(x, size) for x in (q, k, v))
    bc = to_chunks(beta, size)[..., None]  # (b, h, chunks, c, 1)
    cum = to_chunks(inputs.log_gate, size).cumsum(dim=3)  # (b, h, chunks, c, 1)
    gap = cum - cum.transpose(-1, -2)  # (b, h, chunks, c, c): G_t - G_s
    earlier = causal_tril(size, True, q.device)
    within = torch.exp(torch.where(earlier, gap, -torch.inf))
    system = torch.eye(size, dtype=q.dtype, device=q.device) + bc * (kc @ kc.transpose(-1, -2)) * within
    w = torch.linalg.solve_triangular(system, bc * torch.exp(cum) * kc, upper=False, unitriangular=True)
    u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)
    visible = causal_tril(size, strict, q.device)
    scores = (qc @ kc.transpose(-1, -2)) * torch.exp(torch.where(visible, gap, -torch.inf))
    q_decayed = qc * torch.exp(cum)
    k_decayed = kc * torch.exp(cum[:, :, :, -1:] - cum)
    decay = torch.exp(cum[:, :, :, -1:])  # (b, h, chunks, 1, 1)
    state = inputs.initial_state
    if state is None:
        state = q.new_zeros(batch, heads, k_dim, v.shape[-1])
    outs = []
    # unbind, not x[:, :, i]: the backward of an index writes a full-size gradient per chunk
    # (quadratic in length), unbind's stacks the chunks' gradients once.
    per_chunk = (x.unbind(2) for x in (u, w, q_decayed, scores, decay, k_decayed))
    for u_i, w_i, q_i, scores_i, decay_i, k_i in zip(*per_chunk, strict=True):
        updates = u_i - w_i @ state
        outs.append(q_i @ state + scores_i @ updates)
        state = decay_i * state + k_i.transpose(-1, -2) @ updates
    return from_chunks(torch.stack(outs, dim=2), length), state
