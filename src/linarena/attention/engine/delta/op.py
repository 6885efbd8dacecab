"""The delta rule (DeltaNet), optionally gated per head (Gated DeltaNet), in its WY / UT form."""

from __future__ import annotations

from torch import Tensor

from linarena.attention.engine.backend import delta_rule_fla
from linarena.attention.engine.delta.chunk import delta_chunks
from linarena.attention.engine.recurrence import run_op


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

    Computed by chunks of `chunk_size` tokens in the WY / UT form (see
    linarena.attention.engine.delta.chunk): per chunk, T = (I + tril(diag(beta) (Gamma * K K^T),
    -1))^-1 by a unit-triangular solve (Gamma_ts = exp(G_t - G_s), G the log gates summed from
    the chunk's start), W = T diag(beta exp(G)) K and U = T diag(beta) V, so the chunk's updates
    are U - W S_0 given the state S_0 at its start. One autograd Function with a hand-written
    backward: autograd keeps q, k, v, beta, the gates and one state per chunk and pass, the rest
    is recomputed. Not twice differentiable.

    Dtypes: float64 inputs are computed in float64; anything else in float32 with autocast
    off, the output cast back to v's dtype. Returns out (batch, heads, n, v_dim), and with
    return_state=True (causal only) also the final state (batch, heads, k_dim, v_dim) in the
    compute dtype; n = 0 gives an empty out and the initial state (zeros if None).
    backend="fla": fla-core's Triton kernels (causal, CUDA; see
    linarena.attention.engine.backend).
    """
    return run_op("delta_rule", delta_chunks, delta_rule_fla, q, k, v, log_gate, beta,
                  per_feature_gate=False, causal=causal, scale=scale, mask=mask,
                  initial_state=initial_state, return_state=return_state, chunk_size=chunk_size,
                  backend=backend)
