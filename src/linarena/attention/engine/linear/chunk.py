"""Causal linear attention by chunks (notation in common.py), with the feature map applied per
block of chunks and a hand-written backward that recomputes it.

Inside a chunk of C tokens (chunk_size) attention is exact and quadratic; across chunks the
state [S | z] (m, d_v + 1) of all earlier keys is carried, as in the recurrence. The chunks are
processed a block of K at a time (half of CHUNK_FLOATS features, engine/common.py), each block
in a fixed number of batched ops:
    scores = (phi(q) phi(k)^T) * gate            (b, h, K, C, C), causal inside each chunk
    A_c    = phi(k_c)^T (w_c [v_c, 1])           the keys of chunk c, (b, h, K, m, d_v + 1)
    S_c    = sum_{c' < c} D_cc' A_c' + s_c S_in  the state before each chunk and after the block
    [num | den] = scores @ [v, 1] + (phi(q) S_c) * past
so the op count, which sets the cost on a few cores, grows with the number of blocks rather
than of chunks, and every intermediate is the size of a block (cache). The backward pass keeps
nothing of the sequence's length but the output, its denominators and each block's incoming state:
it recomputes phi and the rest of a block, then runs the same ops' derivatives.

Keys with log-scales (Performer) are weighted by exp(log_scale - stabiliser): query i's
stabiliser is the running maximum of the key log-scales up to i, the state's before chunk c
the maximum over the keys before it (`tops`), so every exponent is <= 0 and
D_cc' = exp(tops_{c'+1} - tops_c), s_c = exp(top_in - tops_c), past_i = exp(tops_c - running_i),
w_j = exp(log_scale_j - tops_{c+1}). Without log-scales all of them are 1 (w: the mask), and
their multiplications are skipped.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from linarena.attention.buffers import write_into
from linarena.attention.engine.common import tokens_per_chunk
from linarena.attention.engine.linear.common import (
    LinearAttentionState,
    add_product,
    eps_slope,
    eps_term,
    masked_log_scale,
    plain_weights,
)
from linarena.attention.features import ChunkFeatures, ParamGrads, Pullback


def _blocks(length: int, size: int, per_block: int) -> list[tuple[int, int, int]]:
    """(start, end, chunk length) of each block: whole chunks of `size` tokens, at most
    `per_block` tokens (a multiple of size); a last partial chunk is a block of its own."""
    whole = length - length % size
    blocks = [(lo, min(lo + per_block, whole), size) for lo in range(0, whole, per_block)]
    return blocks + ([(whole, length, length - whole)] if whole < length else [])


class _Block(NamedTuple):
    """One block's features and weights; shapes (b, h, K, C, .) unless said."""

    phi_q: Tensor
    phi_k: Tensor
    values: Tensor  # [w v, w] (w: the mask) without log-scales, [v, 1] with
    key_values: Tensor  # values * w, w relative to the end of the key's chunk
    key_weights: Tensor | None  # (b, h, K, C, 1), with log-scales
    gate: Tensor | None  # (b, h, K, C, C) causal and stabilised, with log-scales
    past: Tensor | None  # (b, h, K, C, 1), with log-scales
    decay: Tensor  # D: (b, h, K, K), or (K, K) without log-scales
    start_scale: Tensor | None  # s: (b, h, K), with log-scales
    last_decay: Tensor | None  # (b, h, 1, 1): from the last chunk's state to the block's end
    eps_t: Tensor | float  # eps_term's value, (b, h, K, C) or a number
    eps_slope: Tensor | None  # its derivative by the query log-scale, or None
    top: Tensor  # (b, h): the stabiliser after the block
    pullbacks: tuple[Pullback, Pullback] | None  # of phi(q), phi(k), when recomputed


def _block(features: ChunkFeatures, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
           bounds: tuple[int, int, int], top: Tensor, eps: float, recompute: bool) -> _Block:
    """Everything of the block `bounds` that does not depend on the carried state; `top` (b, h)
    is the stabiliser of the incoming state."""
    lo, hi, size = bounds
    count = (hi - lo) // size
    if recompute:
        phi_q, query_log_scale, pull_q = features.recompute(q[:, :, lo:hi], lo, hi, True, "q")
        phi_k, key_log_scale, pull_k = features.recompute(k[:, :, lo:hi], lo, hi, False, "k")
        pullbacks = (pull_q, pull_k)
    else:
        phi_q, query_log_scale = features(q[:, :, lo:hi], lo, hi, True, "q")
        phi_k, key_log_scale = features(k[:, :, lo:hi], lo, hi, False, "k")
        pullbacks = None
    chunks = (phi_q.unflatten(2, (count, size)), phi_k.unflatten(2, (count, size)))
    if query_log_scale is not None:
        query_log_scale = query_log_scale.unflatten(2, (count, size))
    mask_c = None if mask is None else mask[:, lo:hi]
    values = F.pad(v[:, :, lo:hi], (0, 1), value=1.0).unflatten(2, (count, size))
    if key_log_scale is None:
        weights = plain_weights(mask_c, v.dtype)
        if weights is not None:
            values.mul_(weights.unflatten(2, (count, size))[..., None])
        eps_t = eps_term(eps, query_log_scale, None, v)
        earlier = torch.ones(count, count, dtype=v.dtype, device=v.device).tril_(-1)
        return _Block(*chunks, values, values, None, None, None, earlier, None, None,
                      eps_t, eps_slope(eps_t, query_log_scale, v), top, pullbacks)
    log_scale = masked_log_scale(key_log_scale, mask_c).unflatten(2, (count, size))
    maxima = log_scale.detach().amax(dim=-1)
    tops = torch.cummax(torch.cat([top[..., None], maxima], dim=-1), dim=-1).values
    running = torch.maximum(torch.cummax(log_scale.detach(), dim=-1).values, tops[..., :-1, None])
    # (b, h, K, C, C): exp(lk_j - running_i), 0 for a later key (an overflow there is cut too).
    gate = (log_scale[..., None, :] - running[..., :, None]).exp_().tril_()
    key_weights = torch.exp(log_scale - tops[..., 1:, None])[..., None]
    past = torch.exp(tops[..., :-1, None] - running)[..., None]
    # [c, c'] = exp(tops_{c'+1} - tops_c) for c' < c, else 0 (an overflow there is cut too).
    decay = (tops[..., None, 1:] - tops[..., :-1, None]).exp_().tril_(-1)
    start_scale = torch.exp(top[..., None] - tops[..., :-1])
    last_decay = torch.exp(tops[..., -2] - tops[..., -1])[..., None, None]
    eps_t = eps_term(eps, query_log_scale, running, v)
    return _Block(*chunks, values, values * key_weights, key_weights, gate, past, decay,
                  start_scale, last_decay, eps_t, eps_slope(eps_t, query_log_scale, v),
                  tops[..., -1], pullbacks)


def _rows(x: Tensor, bounds: tuple[int, int, int]) -> Tensor:
    """The block's rows of a (b, h, n, ...) tensor as chunks (b, h, K, C, ...): a view."""
    lo, hi, size = bounds
    return x[:, :, lo:hi].unflatten(2, (-1, size))


def _scores(block: _Block) -> Tensor:
    """(phi(q) phi(k)^T) * gate inside each chunk: (b, h, K, C, C)."""
    scores = block.phi_q @ block.phi_k.transpose(-1, -2)
    return scores.tril_() if block.gate is None else scores.mul_(block.gate)


def _states(block: _Block, start: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """A (b, h, K, m, d_v + 1), the states before each chunk (same shape) and the state after
    the block (b, h, m, d_v + 1), from the incoming state `start` (b, h, m, d_v + 1)."""
    added = block.phi_k.transpose(-1, -2) @ block.key_values
    states = (block.decay @ added.flatten(-2)).view_as(added)
    if block.start_scale is None:
        states.add_(start[:, :, None])
        return added, states, states[:, :, -1] + added[:, :, -1]
    states.addcmul_(start[:, :, None], block.start_scale[..., None, None])
    return added, states, torch.addcmul(added[:, :, -1], states[:, :, -1], block.last_decay)


class _ChunkedCausal(torch.autograd.Function):
    """See chunked_causal(). Inputs: q, k, v, mask; start (b, h, m, d_v + 1), the incoming
    [S | z], and top (b, h), its stabiliser; the features; eps; the chunk length; then the
    map's trainable parameters. Returns out (b, h, n, d_v), the outgoing [S | z] and its
    stabiliser."""

    @staticmethod
    def forward(ctx, q, k, v, mask, start, top, features, eps, size, *params):
        # Half a bidirectional chunk's budget: a block keeps about twice as many tensors of its
        # size alive (measured: 1.1x faster than the whole budget at 16K tokens, 2 cores).
        per_block = tokens_per_chunk(q, features.num_features(q.shape[-1]), size, 2)
        blocks = _blocks(q.shape[2], size, per_block)
        out, den = torch.empty_like(v), v.new_empty(v.shape[:-1])
        starts, tops = [], []
        state = start
        for bounds in blocks:
            block = _block(features, q, k, v, mask, bounds, top, eps, recompute=False)
            starts.append(state)
            tops.append(top)
            _, states, state = _states(block, state)
            num_den = _scores(block) @ block.values
            if block.past is None:
                add_product(num_den, block.phi_q, states)
            else:
                num_den.add_((block.phi_q @ states).mul_(block.past))
            den_c = write_into(_rows(den, bounds), torch.add, num_den[..., -1], block.eps_t)
            den_c.masked_fill_(den_c == 0, 1.0)  # every term 0: num is 0 too, the output 0
            write_into(_rows(out, bounds), torch.div, num_den[..., :-1], den_c[..., None])
            top = block.top
        ctx.save_for_backward(q, k, v, mask, den, out, torch.stack(starts), torch.stack(tops))
        ctx.features, ctx.eps, ctx.blocks = features, eps, blocks
        top = top.clone()  # never the input itself (maps without log-scales keep it)
        ctx.mark_non_differentiable(top)
        return out, state, top

    @staticmethod
    def backward(ctx, grad_out, grad_state, _grad_top):
        q, k, v, mask, den, out, starts, tops = ctx.saved_tensors
        features, eps = ctx.features, ctx.eps
        grad_q, grad_k, grad_v = (torch.empty_like(x) for x in (q, k, v))
        grad_params = ParamGrads(features.params)
        for index, bounds in reversed(list(enumerate(ctx.blocks))):
            lo, hi, size = bounds
            block = _block(features, q, k, v, mask, bounds, tops[index], eps, recompute=True)
            added, states, _ = _states(block, starts[index])
            scores = _scores(block)
            # d loss / d [num | den] of each query.
            grad_num_den = v.new_empty(block.values.shape)
            g = write_into(grad_num_den[..., :-1], torch.div, _rows(grad_out, bounds),
                           _rows(den, bounds)[..., None])
            grad_den = write_into(grad_num_den[..., -1], torch.linalg.vecdot, g,
                                  _rows(out, bounds)).neg_()
            grad_from_state = (grad_num_den if block.past is None
                               else grad_num_den * block.past)
            # Through the states: S_c feeds chunk c's queries, the last one also the next block.
            grad_states = block.phi_q.transpose(-1, -2) @ grad_from_state
            last = grad_state if block.last_decay is None else grad_state * block.last_decay
            grad_states[:, :, -1] += last
            flat = grad_states.flatten(-2)
            grad_added = (block.decay.transpose(-1, -2) @ flat).view_as(added)
            grad_added[:, :, -1] += grad_state
            if block.start_scale is None:
                grad_state = grad_states.sum(dim=2)
            else:
                grad_state = (block.start_scale[..., None, :] @ flat).view_as(grad_state)
            # Inside the chunks: [num | den] += scores @ values, scores = (phi_q phi_k^T) * gate.
            grad_scores = grad_num_den @ block.values.transpose(-1, -2)
            grad_p = grad_scores.tril_() if block.gate is None else grad_scores * block.gate
            grad_phi_q = add_product(grad_p @ block.phi_k, grad_from_state,
                                     states.transpose(-1, -2))
            grad_phi_k = add_product(grad_p.transpose(-1, -2) @ block.phi_q, block.key_values,
                                     grad_added.transpose(-1, -2))
            grad_key_values = block.phi_k @ grad_added
            grad_values = scores.transpose(-1, -2) @ grad_num_den
            grad_key_log_scale = None
            if block.key_weights is None:
                grad_values.add_(grad_key_values)
                if mask is not None:  # values = [w v, w], w the mask
                    grad_values.mul_(mask[:, None, lo:hi, None].unflatten(2, (-1, size)))
            else:
                grad_values.addcmul_(grad_key_values, block.key_weights)
                # d gate_ij / d lk_j = gate_ij, d w_j / d lk_j = w_j.
                grad_key_log_scale = ((grad_scores * scores).sum(dim=-2)
                                      + torch.linalg.vecdot(grad_key_values, block.key_values))
            _rows(grad_v, bounds).copy_(grad_values[..., :-1])
            grad_query_log_scale = None if block.eps_slope is None else grad_den * block.eps_slope
            pull_q, pull_k = block.pullbacks
            for target, pull, grad_phi, grad_log_scale in (
                (grad_q, pull_q, grad_phi_q, grad_query_log_scale),
                (grad_k, pull_k, grad_phi_k, grad_key_log_scale),
            ):
                grad_x, grads = pull(grad_phi.flatten(2, 3), None if grad_log_scale is None
                                     else grad_log_scale.flatten(2))
                target[:, :, lo:hi] = grad_x
                grad_params.add(grads)
        return (grad_q, grad_k, grad_v, None, grad_state, None, None, None, None,
                *grad_params.result())


def chunked_causal(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, features: ChunkFeatures, eps: float,
    chunk_size: int, state: LinearAttentionState,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal linear attention by chunks of `chunk_size` tokens, starting from `state` (the state
    after the tokens before these).

    q, k: (batch, heads, n, head_dim), the map's inputs; v: (batch, heads, n, d_v); mask: bool
    (batch, n) or None (padded q, k, v already zeroed); features: the map of this call, applied
    per block. Returns (out (batch, heads, n, d_v), the state after the n tokens).
    """
    length = q.shape[2]
    start = torch.cat([state.kv, state.z[..., None]], dim=-1)
    out, final, top = _ChunkedCausal.apply(q, k, v, mask, start, state.top, features, eps,
                                           min(chunk_size, length), *features.params)
    return out, LinearAttentionState(final[..., :-1], final[..., -1], top, state.position + length,
                                     state.feature_map)
