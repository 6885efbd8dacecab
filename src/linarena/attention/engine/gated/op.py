"""Gated linear attention: a linear-attention state with a decay per head or per key feature."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.engine.backend import gated_linear_attention_fla
from linarena.attention.engine.gated.chunk import gated_chunks
from linarena.attention.engine.recurrence import run_op


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

    Computed by chunks of `chunk_size` tokens (linarena.attention.engine.gated.chunk): exact
    attention with the decay inside a chunk (a (c, c) decay matrix for per-head gates, a
    hierarchy of matrix products for per-feature gates, never a (c, c, k_dim) tensor; every
    exponent <= 0, so any gate strength is exact), the state carried across chunks; the
    backward half of a bidirectional call is a strict-causal pass over the reversed sequence.
    One autograd Function with a hand-written backward: autograd keeps q, k, v, the gates and
    one state per chunk and pass, the rest is recomputed. Not twice differentiable.

    Dtypes: float64 inputs are computed in float64; anything else in float32 with autocast
    off, the output cast back to v's dtype. Returns out (batch, heads, n, v_dim), and with
    return_state=True (causal only) also the final state (batch, heads, k_dim, v_dim) in the
    compute dtype, which initial_state of a next call continues from exactly; n = 0 gives an
    empty out and the initial state (zeros if None). backend="fla":
    fla-core's Triton kernels (causal, CUDA; see linarena.attention.engine.backend).
    """
    return run_op("gated_linear_attention", gated_chunks, gated_linear_attention_fla, q, k, v,
                  log_gate, None, per_feature_gate=True, causal=causal, scale=scale, mask=mask,
                  initial_state=initial_state, return_state=return_state, chunk_size=chunk_size,
                  backend=backend)
