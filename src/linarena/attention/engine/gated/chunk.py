"""The chunked engine of gated linear attention: one autograd Function for the whole call (the
causal pass, and when bidirectional the strict pass over the reversed sequence), with a
hand-written backward that recomputes inside each chunk.

Autograd through the chunk loop would keep every chunk's decays, scores and rescaled q and k,
and a bidirectional call reversed copies of the inputs; this Function keeps q, k, v, the log
gates and the state before each chunk of each pass (k_dim x v_dim per chunk, the size of q for
chunks of v_dim tokens), and recomputes the rest in the backward pass. The chunks are processed
a block at a time (common.block_bounds), so no intermediate is the size of the sequence.

Notation (per batch and head): chunks of c tokens, cum_t the log gates summed from the chunk's
start up to token t (<= 0, decreasing), last = cum of the chunk's last token, S the state before
the chunk. Inside a chunk
    out_i = sum_{j <= i} (q_i * k_j * exp(cum_i - cum_j)) . v_j + (q_i * exp(cum_i)) . S
    S'    = diag(exp(last)) S + sum_j (k_j * exp(last - cum_j)) v_j^T,
every exponent <= 0. The intra-chunk sum (decay_blocks.py, beside this file) takes a (c, c)
decay matrix for per-head gates and a hierarchy of matrix products for per-feature gates.

Gradient of the log gates: cum_t enters only as +cum_t beside q_t, -cum_t beside k_t, and as
`last` in S', so d loss / d cum_t = q_t * dq_t - k_t * dk_t (+ the row sums of dS' * S' at the
last token), and d loss / d g_t is its sum over t' >= t in the chunk (Yang et al., ICML 2024,
sec. 4). Summed over the features for a per-head gate.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from linarena.attention.engine.gated.decay_blocks import intra_chunk, intra_chunk_backward
from linarena.attention.engine.recurrence import OpInputs, Pass, passes, reverse_cumsum


def _scaled(x: Tensor, factor: Tensor | None) -> Tensor:
    return x if factor is None else x * factor


class _Block:
    """A block of chunks of one pass: q, k, v (b, h, K, c, .), cum (b, h, K, c, g) or None
    without gates, and the decays exp(cum) (queries), exp(last - cum) (keys) and exp(last)
    as a column (b, h, K, g, 1) scaling the state's rows."""

    def __init__(self, p: Pass, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, lo: int,
                 hi: int, gated: bool) -> None:
        self.q, self.k, self.v = (p.read(x, lo, hi) for x in (q, k, v))
        self.cum = p.read(log_gate, lo, hi, gate=True).cumsum(dim=3) if gated else None
        if self.cum is None:
            self.q_decay = self.k_decay = self.state_decay = None
            return
        last = self.cum[..., -1:, :]
        self.q_decay, self.k_decay = torch.exp(self.cum), torch.exp(last - self.cum)
        self.state_decay = torch.exp(last).transpose(-1, -2)

    def state_decay_of(self, i: int) -> Tensor | None:
        return None if self.state_decay is None else self.state_decay[:, :, i]


def _forward_pass(p: Pass, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, state: Tensor,
                  gated: bool, out: Tensor) -> Tensor:
    """Writes the pass's unscaled outputs into out (adds them for the reversed pass); returns
    the state before each chunk and the final one (b, h, chunks + 1, k_dim, v_dim)."""
    states = q.new_empty(*q.shape[:2], p.chunks + 1, q.shape[-1], v.shape[-1])
    for lo, hi in p.blocks(q, max(q.shape[-1], v.shape[-1], p.size)):
        b = _Block(p, q, k, v, log_gate, lo, hi, gated)
        added = _scaled(b.k, b.k_decay).transpose(-1, -2) @ b.v  # (b, h, K, k_dim, v_dim)
        before = torch.empty_like(added)
        for i in range(hi - lo):
            before[:, :, i] = state
            state = added[:, :, i] + _scaled(state, b.state_decay_of(i))
        states[:, :, lo:hi] = before
        block_out = intra_chunk(b.q, b.k, b.v, b.cum, p.reverse)
        block_out += _scaled(b.q, b.q_decay) @ before
        p.write(out, block_out, lo, hi, add=p.reverse)
    states[:, :, -1] = state
    return states


def _backward_pass(p: Pass, q: Tensor, k: Tensor, v: Tensor, log_gate: Tensor, states: Tensor,
                   grad_out: Tensor, scale: float, grad_state: Tensor, gated: bool,
                   grads: list[Tensor | None]) -> Tensor:
    """Writes (adds, for the reversed pass) the pass's gradients by q, k, v and the log gates
    into grads; returns the gradient by the pass's initial state, from that by its final state."""
    dq, dk, dv, dg = grads
    for lo, hi in reversed(p.blocks(q, max(q.shape[-1], v.shape[-1], p.size))):
        b = _Block(p, q, k, v, log_gate, lo, hi, gated)
        do = p.read(grad_out, lo, hi) * scale
        before = states[:, :, lo:hi].contiguous()
        q_scaled, k_scaled = _scaled(b.q, b.q_decay), _scaled(b.k, b.k_decay)
        # S_c feeds the outputs of chunk c (through q_scaled) and, decayed, the next state.
        from_outputs = q_scaled.transpose(-1, -2) @ do  # (b, h, K, k_dim, v_dim)
        after = torch.empty_like(from_outputs)  # gradient by the state after each chunk
        for i in reversed(range(hi - lo)):
            after[:, :, i] = grad_state
            grad_state = from_outputs[:, :, i] + _scaled(grad_state, b.state_decay_of(i))
        dq_b, dk_b, dv_b = intra_chunk_backward(b.q, b.k, b.v, b.cum, p.reverse, do)
        dq_b += _scaled(do @ before.transpose(-1, -2), b.q_decay)
        dk_b += _scaled(b.v @ after.transpose(-1, -2), b.k_decay)
        dv_b += k_scaled @ after
        for target, block in ((dq, dq_b), (dk, dk_b), (dv, dv_b)):
            p.write(target, block, lo, hi, add=p.reverse)
        if dg is not None:
            grad_cum = b.q * dq_b - b.k * dk_b
            # `last` enters the next state: d S' / d last_f is row f of S'.
            grad_cum[..., -1, :] += (after * states[:, :, lo + 1:hi + 1]).sum(dim=-1)
            if log_gate.shape[-1] == 1:
                grad_cum = grad_cum.sum(dim=-1, keepdim=True)
            p.write(dg, reverse_cumsum(grad_cum, dim=3), lo, hi, gate=True, add=p.reverse)
    return grad_state


class GatedChunks(torch.autograd.Function):
    """Inputs: q, k (b, h, n, k_dim), v (b, h, n, v_dim), log_gate (b, h, n, g), g = 1 or k_dim,
    initial_state (b, h, k_dim, v_dim) (zeros when bidirectional), the chunk size, causal, gated
    (False: the log gates are all zero and skipped) and the scale. Returns the output
    (b, h, n, v_dim) and the final state of the causal pass (b, h, k_dim, v_dim)."""

    @staticmethod
    def forward(ctx, q, k, v, log_gate, initial_state, size, causal, gated, scale):
        out = v.new_empty(v.shape)
        zero = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
        states = [_forward_pass(p, q, k, v, log_gate, initial_state if i == 0 else zero, gated,
                                out)
                  for i, p in enumerate(passes(q.shape[2], size, causal))]
        out.mul_(scale)
        ctx.save_for_backward(q, k, v, log_gate, *states)
        ctx.size, ctx.causal, ctx.gated, ctx.scale = size, causal, gated, scale
        return out, states[0][:, :, -1].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_final):
        q, k, v, log_gate, *states = ctx.saved_tensors
        grads = [x.new_empty(x.shape) for x in (q, k, v)]
        grads.append(log_gate.new_empty(log_gate.shape)
                     if ctx.gated and ctx.needs_input_grad[3] else None)
        grad_initial = None
        for p, pass_states in zip(passes(q.shape[2], ctx.size, ctx.causal), states, strict=True):
            grad_state = grad_final if not p.reverse else torch.zeros_like(grad_final)
            grad_state = _backward_pass(p, q, k, v, log_gate, pass_states, grad_out, ctx.scale,
                                        grad_state, ctx.gated, grads)
            grad_initial = grad_state if grad_initial is None else grad_initial
        return (*grads, grad_initial if ctx.needs_input_grad[4] else None,
                None, None, None, None)


def gated_chunks(inputs: OpInputs, size: int, causal: bool, gated: bool) -> tuple[Tensor, Tensor]:
    """GatedChunks on an op's checked inputs (see there): out scaled, and the final state."""
    q, v, start = inputs.q, inputs.v, inputs.initial_state
    if start is None:
        start = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    return GatedChunks.apply(q, inputs.k, v, inputs.log_gate, start, size, causal, gated,
                             inputs.scale)
