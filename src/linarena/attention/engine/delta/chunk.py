"""The chunked engine of the delta rule (WY / UT form): one autograd Function for the whole
call (the causal pass, and when bidirectional the strict pass over the reversed sequence), with
a hand-written backward that recomputes inside each chunk.

It keeps q, k, v, beta, the log gates and the state before each chunk of each pass; a chunk's
T, W, U, scores and updates are recomputed in the backward pass (autograd through the chunk
loop would keep them all, and a state-sized tensor per chunk more). The chunks are processed a
block at a time (common.block_bounds), so no intermediate is the size of the sequence.

Notation (per batch and head, one chunk of c tokens): cum_t the log gates summed from the
chunk's start (<= 0), last = cum of its last token, Gamma_ts = exp(cum_t - cum_s) for s < t,
S the state before the chunk.
    A      = I + tril(diag(beta) (Gamma * K K^T), -1)      (unit lower triangular), T = A^-1
    W      = T (beta exp(cum) K),  U = T (beta V)
    delta  = U - W S                                       (the chunk's updates)
    out    = (Q exp(cum)) S + (Q K^T * Gamma_visible) delta
    S'     = exp(last) S + (K exp(last - cum))^T delta
Gamma_visible includes the diagonal (1) unless strict. Every exponent is <= 0. Only the
products with S are sequential (one chunk after the other); the rest is batched over a block.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from linarena.attention.engine.recurrence import OpInputs, Pass, causal_tril, passes, reverse_cumsum


class _Block:
    """Everything of a block of chunks (lo..hi of pass p) that does not depend on the state:
    shapes (b, h, K, c, .)."""

    def __init__(self, p: Pass, inputs: tuple[Tensor, ...], lo: int, hi: int,
                 gated: bool) -> None:
        q, k, v, beta, log_gate = inputs
        q, k, v, beta = (p.read(x, lo, hi) for x in (q, k, v, beta))
        cum = p.read(log_gate, lo, hi, gate=True).cumsum(dim=3) if gated else None
        self.q, self.k, self.v, self.beta, self.cum = q, k, v, beta, cum
        size = q.shape[-2]
        earlier = causal_tril(size, True, q.device)
        eye = torch.eye(size, dtype=q.dtype, device=q.device)
        if cum is None:
            self.gamma = earlier.to(q.dtype)
            self.q_decayed, self.k_decayed, self.decay, self.k_in = q, k, None, k
        else:
            # exp of the masked gap: exp(cum_t - cum_s) for s > t would overflow.
            self.gamma = torch.exp(torch.where(earlier, cum - cum.transpose(-1, -2), -torch.inf))
            last = cum[..., -1:, :]
            grows = torch.exp(cum)
            self.q_decayed, self.k_in = q * grows, k * grows
            self.k_decayed = k * torch.exp(last - cum)
            self.decay = torch.exp(last)  # (b, h, K, 1, 1)
        self.gamma_visible = self.gamma if p.reverse else self.gamma + eye
        self.kk = k @ k.transpose(-1, -2)
        self.system = beta * self.kk * self.gamma + eye
        # T once, then matrix products: a solve for W and U (or their gradients) is slower.
        self.inverse = torch.linalg.solve_triangular(self.system, eye.expand_as(self.system),
                                                     upper=False, unitriangular=True)
        self.w = self.inverse @ (beta * self.k_in)
        self.u = self.inverse @ (beta * v)
        self.scores = (q @ k.transpose(-1, -2)) * self.gamma_visible

    def decay_of(self, i: int) -> Tensor | None:
        return None if self.decay is None else self.decay[:, :, i]


def _decayed(state: Tensor, decay: Tensor | None) -> Tensor:
    return state if decay is None else decay * state


def _forward_pass(p: Pass, inputs: tuple[Tensor, ...], state: Tensor, gated: bool,
                  out: Tensor) -> Tensor:
    """Writes the pass's unscaled outputs into out (adds them for the reversed pass); returns
    the state before each chunk and the final one (b, h, chunks + 1, k_dim, v_dim)."""
    q, v = inputs[0], inputs[2]
    states = q.new_empty(*q.shape[:2], p.chunks + 1, q.shape[-1], v.shape[-1])
    for lo, hi in p.blocks(q, max(q.shape[-1], v.shape[-1], p.size)):
        block = _Block(p, inputs, lo, hi, gated)
        before = torch.empty_like(states[:, :, lo:hi])
        updates = torch.empty_like(block.u)
        for i in range(hi - lo):
            before[:, :, i] = state
            updates[:, :, i] = block.u[:, :, i] - block.w[:, :, i] @ state
            state = (_decayed(state, block.decay_of(i))
                     + block.k_decayed[:, :, i].transpose(-1, -2) @ updates[:, :, i])
        states[:, :, lo:hi] = before
        p.write(out, block.q_decayed @ before + block.scores @ updates, lo, hi, add=p.reverse)
    states[:, :, -1] = state
    return states


def _backward_pass(p: Pass, inputs: tuple[Tensor, ...], states: Tensor, grad_out: Tensor,
                   scale: float, grad_state: Tensor, gated: bool,
                   grads: list[Tensor | None]) -> Tensor:
    """Writes (adds, for the reversed pass) the pass's gradients by q, k, v, beta and the log
    gates into grads; returns the gradient by the pass's initial state, from that by its final
    state."""
    q, v = inputs[0], inputs[2]
    for lo, hi in reversed(p.blocks(q, max(q.shape[-1], v.shape[-1], p.size))):
        block = _Block(p, inputs, lo, hi, gated)
        do = p.read(grad_out, lo, hi) * scale
        before = states[:, :, lo:hi].contiguous()
        updates = block.u - block.w @ before
        grad_updates = block.scores.transpose(-1, -2) @ do  # through the outputs
        from_outputs = block.q_decayed.transpose(-1, -2) @ do
        after = torch.empty_like(before)  # gradient by the state after each chunk
        for i in reversed(range(hi - lo)):
            after[:, :, i] = grad_state
            grad_updates[:, :, i] += block.k_decayed[:, :, i] @ grad_state
            grad_state = (from_outputs[:, :, i] + _decayed(grad_state, block.decay_of(i))
                          - block.w[:, :, i].transpose(-1, -2) @ grad_updates[:, :, i])
        block_grads = _chunk_backward(block, before, updates, after, grad_updates, do)
        for target, grad in zip(grads[:4], block_grads[:4], strict=True):
            p.write(target, grad, lo, hi, add=p.reverse)
        if grads[4] is not None:
            p.write(grads[4], reverse_cumsum(block_grads[4], dim=3), lo, hi, gate=True,
                    add=p.reverse)
    return grad_state


class DeltaChunks(torch.autograd.Function):
    """Inputs: q, k (b, h, n, k_dim), v (b, h, n, v_dim), beta (b, h, n, 1), log_gate
    (b, h, n, 1), initial_state (b, h, k_dim, v_dim) (zeros when bidirectional), the chunk size,
    causal, gated (False: log gates all zero, skipped) and the scale. Returns the output
    (b, h, n, v_dim) and the final state of the causal pass."""

    @staticmethod
    def forward(ctx, q, k, v, beta, log_gate, initial_state, size, causal, gated, scale):
        out = v.new_empty(v.shape)
        zero = torch.zeros_like(initial_state)
        states = [_forward_pass(p, (q, k, v, beta, log_gate),
                                initial_state if i == 0 else zero, gated, out)
                  for i, p in enumerate(passes(q.shape[2], size, causal))]
        out.mul_(scale)
        ctx.save_for_backward(q, k, v, beta, log_gate, *states)
        ctx.size, ctx.causal, ctx.gated, ctx.scale = size, causal, gated, scale
        return out, states[0][:, :, -1].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_final):
        q, k, v, beta, log_gate, *states = ctx.saved_tensors
        grads = [x.new_empty(x.shape) for x in (q, k, v, beta)]
        grads.append(log_gate.new_empty(log_gate.shape)
                     if ctx.gated and ctx.needs_input_grad[4] else None)
        grad_initial = None
        for p, pass_states in zip(passes(q.shape[2], ctx.size, ctx.causal), states, strict=True):
            grad_state = grad_final if not p.reverse else torch.zeros_like(grad_final)
            grad_state = _backward_pass(p, (q, k, v, beta, log_gate), pass_states, grad_out,
                                        ctx.scale, grad_state, ctx.gated, grads)
            grad_initial = grad_state if grad_initial is None else grad_initial
        return (*grads, grad_initial if ctx.needs_input_grad[5] else None,
                None, None, None, None)


def _chunk_backward(block: _Block, before: Tensor, updates: Tensor, after: Tensor,
                    grad_updates: Tensor, grad_out: Tensor) -> tuple[Tensor, ...]:
    """Gradients by q, k, v, beta (b, h, K, c, 1) and cum (b, h, K, c, 1; None without gates)
    of a block, given the gradients of its updates (delta) and of the state after each chunk."""
    q, k, v, beta = block.q, block.k, block.v, block.beta
    grad_scores = grad_out @ updates.transpose(-1, -2)
    grad_q_decayed = grad_out @ before.transpose(-1, -2)
    grad_k_decayed = updates @ after.transpose(-1, -2)
    # delta = U - W S; W = T beta K_in, U = T beta V with T = A^-1: d(beta K_in) = T^T dW,
    # d(beta V) = T^T dU, dA = -T^T dT T^T = -(d(beta K_in) W^T + d(beta V) U^T), strictly lower.
    grad_rhs_k = block.inverse.transpose(-1, -2) @ (-grad_updates @ before.transpose(-1, -2))
    grad_rhs_v = block.inverse.transpose(-1, -2) @ grad_updates
    grad_system = -(grad_rhs_k @ block.w.transpose(-1, -2)
                    + grad_rhs_v @ block.u.transpose(-1, -2)) * block.gamma
    grad_kk = beta * grad_system  # d (K K^T)
    grad_qk = grad_scores * block.gamma_visible  # d (Q K^T)
    dq = grad_qk @ k
    dk = (grad_kk + grad_kk.transpose(-1, -2)) @ k + grad_qk.transpose(-1, -2) @ q
    dv = beta * grad_rhs_v
    dbeta = ((grad_system * block.kk).sum(dim=-1, keepdim=True)
             + (grad_rhs_v * v).sum(dim=-1, keepdim=True))
    if block.cum is None:
        dq += grad_q_decayed
        dk += grad_k_decayed + beta * grad_rhs_k
        dbeta += (grad_rhs_k * k).sum(dim=-1, keepdim=True)
        return dq, dk, dv, dbeta, None
    grows = torch.exp(block.cum)
    dq += grad_q_decayed * grows
    dk += grad_k_decayed * torch.exp(block.cum[..., -1:, :] - block.cum)
    dk += beta * grows * grad_rhs_k
    dbeta += (grad_rhs_k * block.k_in).sum(dim=-1, keepdim=True)
    # cum_t enters Gamma_ts (+) and Gamma_st (-), the scaled q and rhs (+), the scaled k (-).
    pair = grad_kk * block.kk + grad_scores * block.scores
    grad_cum = (pair.sum(dim=-1, keepdim=True) - pair.sum(dim=-2)[..., None]
                + (grad_q_decayed * block.q_decayed).sum(dim=-1, keepdim=True)
                + (grad_rhs_k * block.k_in * beta).sum(dim=-1, keepdim=True)
                - (grad_k_decayed * block.k_decayed).sum(dim=-1, keepdim=True))
    # last enters exp(last) S and the scaled k.
    grad_last = ((after * before).sum(dim=(-1, -2)) * block.decay[..., 0, 0]
                 + (grad_k_decayed * block.k_decayed).sum(dim=(-1, -2)))
    grad_cum[..., -1, 0] += grad_last
    return dq, dk, dv, dbeta, grad_cum


def delta_chunks(inputs: OpInputs, size: int, causal: bool, gated: bool) -> tuple[Tensor, Tensor]:
    """DeltaChunks on an op's checked inputs (see there): out scaled, and the final state."""
    q, v, start = inputs.q, inputs.v, inputs.initial_state
    if start is None:
        start = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    return DeltaChunks.apply(q, inputs.k, v, inputs.beta[..., None], inputs.log_gate, start,
                             size, causal, gated, inputs.scale)
