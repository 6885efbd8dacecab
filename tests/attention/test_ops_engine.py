"""The chunked engines behind both ops (hand-written backward passes, blocks of chunks, the
hierarchy of per-feature decay blocks): extreme gates stay finite and exact, any chunk size
(padded to a power of two inside), results independent of the block size, gradients by every
input (gates, beta, initial state) against gradcheck and against autograd through the float64
references, and what autograd keeps. The one-token steps (decoding) against both: token by
token they give the references' and the chunked op's outputs and final state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.attention import assert_close_float64

import linarena.attention.engine.common as kernel_common
from linarena.attention.engine import (
    delta_rule,
    delta_rule_step,
    gated_linear_attention,
    gated_linear_attention_step,
)
from linarena.attention.engine.gated.naive import gla_quadratic, recurrence

BATCH, HEADS, DIM = 2, 2, 8


def tensors(length, dim=DIM, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(BATCH, HEADS, length, dim, generator=g, dtype=dtype) for _ in range(3)]


def gates(kind, length, low, high=0.0, dim=DIM, seed=1, dtype=torch.float64):
    """None, per-head (b, h, n) or per-feature (b, h, n, dim) log gates uniform in (low, high)."""
    if kind == "none":
        return None
    g = torch.Generator().manual_seed(seed)
    shape = (BATCH, HEADS, length) + ((dim,) if kind == "feature" else ())
    return low + (high - low) * torch.rand(*shape, generator=g, dtype=dtype)


def delta_inputs(length, seed=0, dtype=torch.float64):
    q, k, v = tensors(length, seed=seed, dtype=dtype)
    beta = torch.rand(BATCH, HEADS, length, generator=torch.Generator().manual_seed(seed + 7),
                      dtype=dtype)
    return q, F.normalize(k, dim=-1), v, beta


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", ["head", "feature"])
def test_gla_gates_near_minus_20_per_token_are_finite_and_exact(kind, causal):
    # A chunk of 64 such tokens sums to about -1280: exp(+1280) of a factorisation over the
    # chunk would overflow even float64; every exponent in the engine stays <= 0.
    q, k, v = tensors(150)
    gate = gates(kind, 150, -21.0, -19.0)
    out = gated_linear_attention(q, k, v, gate, causal=causal)
    assert torch.isfinite(out).all()
    assert_close_float64(out, gla_quadratic(q, k, v, gate, causal=causal), 150 * DIM)
    q32, k32, v32 = (x.float().requires_grad_(True) for x in (q, k, v))
    gate32 = gate.float().requires_grad_(True)
    out32 = gated_linear_attention(q32, k32, v32, gate32, causal=causal)
    torch.testing.assert_close(out32.double(), out, rtol=1e-4, atol=1e-4)
    grads = torch.autograd.grad(out32.square().sum(), (q32, k32, v32, gate32))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_short_sequence_of_strong_feature_gates_has_exact_gradients(dtype, causal):
    # 62 tokens: one chunk of no power of two, padded to 64 inside the hierarchy. Gates near
    # -2 per token (an HGRN2 forget gate near 0.13) sum to about -124 over it, beyond float32's
    # exp range (-88): the padding must continue the gates' running sum, not restart it at 0,
    # or exp(0 - cum) overflows and 0 * inf turns the real tokens' gradients NaN.
    n = 62 if dtype == torch.float32 else 45
    low = -2.5 if dtype == torch.float32 else -40.0  # float64's exp overflows past 709
    q, k, v = tensors(n)
    gate = gates("feature", n, low, low + 1.0)
    expected = [x.clone().requires_grad_(True) for x in (q, k, v, gate)]
    reference = gla_quadratic(*expected[:3], expected[3], causal=causal)
    grad_out = torch.randn(reference.shape, generator=torch.Generator().manual_seed(3),
                           dtype=torch.float64)
    wanted = torch.autograd.grad((reference * grad_out).sum(), expected)
    args = [x.to(dtype).requires_grad_(True) for x in (q, k, v, gate)]
    out = gated_linear_attention(*args[:3], args[3], causal=causal)
    grads = torch.autograd.grad((out * grad_out.to(dtype)).sum(), args)
    for got, want in zip(grads, wanted, strict=True):
        assert torch.isfinite(got).all()
        if dtype == torch.float64:
            assert_close_float64(got, want, 4 * n * DIM)
        else:
            torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("causal", [True, False])
def test_delta_rule_gates_near_minus_20_per_token_are_finite_and_exact(causal):
    q, k, v, beta = delta_inputs(150)
    gate = gates("head", 150, -21.0, -19.0)
    out = delta_rule(q, k, v, beta, gate, causal=causal)
    expected, _ = recurrence(q, k, v, gate, beta, causal=causal)
    assert_close_float64(out, expected, 150 * DIM)
    args = [x.float().requires_grad_(True) for x in (q, k, v, beta, gate)]
    grads = torch.autograd.grad(delta_rule(*args, causal=causal).square().sum(), args)
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("chunk_size", [3, 7, 24, 48, 64, 100])
@pytest.mark.parametrize("kind", ["none", "head", "feature"])
def test_long_sequences_any_chunk_size_equal_the_reference(kind, chunk_size):
    # 300 tokens: several chunks, the last partial; chunks of no power of two are padded
    # inside to one (per-feature gates), every level of the hierarchy in use.
    q, k, v = tensors(300)
    gate = gates(kind, 300, -1.5)
    for causal in (True, False):
        out = gated_linear_attention(q, k, v, gate, causal=causal, chunk_size=chunk_size)
        assert_close_float64(out, gla_quadratic(q, k, v, gate, causal=causal), 300 * DIM)


@pytest.mark.parametrize("chunk_size", [1, 8])
def test_results_do_not_depend_on_the_block_size(monkeypatch, chunk_size):
    # A block of chunks is sized by CHUNK_FLOATS; a tiny budget makes every chunk a block (and
    # with chunks of 1, the reversed pass's first block holds no gate).
    q, k, v = tensors(70)
    gate = gates("feature", 70, -0.5)
    qd, kd, vd, beta = delta_inputs(70)
    args = [x.requires_grad_(True) for x in (q, k, v, gate)]
    delta_args = [x.requires_grad_(True) for x in (qd, kd, vd, beta, gate[..., 0].detach())]

    def run():
        results = []
        for fn, xs in ((gated_linear_attention, args), (delta_rule, delta_args)):
            for causal in (True, False):
                out = fn(*xs, causal=causal, chunk_size=chunk_size)
                results += [out, *torch.autograd.grad((out * out.cos()).sum(), xs)]
        return results

    whole = run()
    monkeypatch.setattr(kernel_common, "CHUNK_FLOATS", 1)
    for tiny, full in zip(run(), whole, strict=True):
        assert_close_float64(tiny, full, 70 * DIM)


@pytest.mark.parametrize("kind", ["none", "head", "feature"])
def test_gla_gradcheck_with_initial_and_final_state(kind):
    # Gradients by q, k, v, the log gates and the initial state, through the output and the
    # final state; chunks of 5 (padded to 8 for per-feature gates), 13 tokens.
    q, k, v = tensors(13, dim=4)
    start = torch.randn(BATCH, HEADS, 4, 4, dtype=torch.float64)
    gate = gates(kind, 13, -1.0, -0.1, dim=4)
    args = [x.requires_grad_(True) for x in (q, k, v, start, gate) if x is not None]

    def fn(q, k, v, start, gate=None):
        return gated_linear_attention(q, k, v, gate, causal=True, chunk_size=5,
                                      initial_state=start, return_state=True)

    assert torch.autograd.gradcheck(fn, tuple(args))


@pytest.mark.parametrize("gated", [False, True])
def test_delta_rule_gradcheck_with_initial_and_final_state(gated):
    q, k, v, beta = delta_inputs(13)
    q, k, v = (x[..., :4] for x in (q, k, v))
    k = F.normalize(k, dim=-1)
    beta = 0.1 + 0.8 * beta
    start = torch.randn(BATCH, HEADS, 4, 4, dtype=torch.float64)
    gate = gates("head", 13, -1.0, -0.1) if gated else None
    args = [x.requires_grad_(True) for x in (q, k, v, beta, start, gate) if x is not None]

    def fn(q, k, v, beta, start, gate=None):
        return delta_rule(q, k, v, beta, gate, causal=True, chunk_size=5, initial_state=start,
                          return_state=True)

    assert torch.autograd.gradcheck(fn, tuple(args))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", ["head", "feature"])
def test_gla_gradients_equal_autograd_through_the_reference(kind, causal):
    # Longer than gradcheck affords: 40 tokens in chunks of 16, strong and weak gates mixed.
    q, k, v = tensors(40)
    gate = gates(kind, 40, -8.0)
    weights = torch.randn(BATCH, HEADS, 40, DIM, dtype=torch.float64)
    grads = []
    for fn in (lambda *xs: gated_linear_attention(*xs, causal=causal, chunk_size=16),
               lambda *xs: gla_quadratic(*xs, causal=causal)):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v, gate)]
        grads.append(torch.autograd.grad((fn(*xs) * weights).sum(), xs))
    for ours, reference in zip(*grads, strict=True):
        assert_close_float64(ours, reference, 40 * 40 * DIM)


@pytest.mark.parametrize("causal", [True, False])
def test_delta_rule_gradients_equal_autograd_through_the_recurrence(causal):
    q, k, v, beta = delta_inputs(40)
    gate = gates("head", 40, -3.0)
    weights = torch.randn(BATCH, HEADS, 40, DIM, dtype=torch.float64)
    grads = []
    for fn in (lambda *xs: delta_rule(*xs, causal=causal, chunk_size=16),
               lambda q, k, v, b, g: recurrence(q, k, v, g, b, causal=causal)[0]):
        xs = [x.clone().requires_grad_(True) for x in (q, k, v, beta, gate)]
        grads.append(torch.autograd.grad((fn(*xs) * weights).sum(), xs))
    for ours, reference in zip(*grads, strict=True):
        assert_close_float64(ours, reference, 40 * 40 * DIM)


def saved_floats_per_token(fn, args, causal: bool) -> float:
    """Floats autograd keeps for the backward pass, per token and head (each storage once)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes() // 4
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*(x.requires_grad_(True) for x in args), causal=causal)
    batch, heads, length = args[0].shape[:3]
    return sum(storages.values()) / (batch * heads * length)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("op", ["feature", "head", "delta"])
def test_autograd_keeps_the_inputs_and_one_state_per_chunk(op, causal):
    # q, k, v (3 x 64), the gates (64 per feature, 1 per head), beta (1), and a 64 x 64 state
    # per chunk of 64 tokens and one more (64 * 17 / 16 at 1024 tokens): nothing per token
    # beyond the inputs, twice over for a bidirectional call (its reversed copies), never a
    # chunk's scores or decays.
    length, dim = 1024, 64
    q, k, v = (x.float() for x in tensors(length, dim=dim))
    if op == "delta":
        beta = torch.rand(BATCH, HEADS, length)
        args = (q, F.normalize(k, dim=-1), v, beta, -0.1 * torch.rand(BATCH, HEADS, length))
        fn, inputs = delta_rule, 3 * dim + 2
    else:
        gate = gates(op, length, -0.5, dim=dim, dtype=torch.float32)
        fn, inputs = gated_linear_attention, 3 * dim + (dim if op == "feature" else 1)
    if op != "delta":
        args = (q, k, v, gate)
    bound = (inputs + dim * 17 / 16) * (1 if causal else 2)
    assert saved_floats_per_token(fn, args, causal) <= bound


STEPS = {"gated": (gated_linear_attention_step, gated_linear_attention),
         "delta": (delta_rule_step, delta_rule)}


def step_through(step, args, mask, start):
    """A one-token step iterated over the tokens of args (batch, heads, n, ...) from `start`:
    (outputs (batch, heads, n, v_dim), final state)."""
    outs, state = [], start
    for t in range(args[0].shape[2]):
        token = [None if x is None else x[:, :, t:t + 1] for x in args]
        out, state = step(*token, mask=mask[:, t:t + 1], initial_state=state)
        outs.append(out)
    return torch.cat(outs, dim=2), state


@pytest.mark.parametrize(("op", "kind", "low"), [
    ("gated", "none", 0.0), ("gated", "head", -1.0), ("gated", "feature", -1.0),
    ("gated", "head", -21.0), ("gated", "feature", -21.0),
    ("delta", "none", 0.0), ("delta", "head", -1.0), ("delta", "head", -21.0)])
def test_steps_token_by_token_equal_the_references_and_the_chunked_op(op, kind, low):
    # From a random state; row 1's token 6 is padded (junk NaN there): it leaves the state as
    # it was and outputs 0, so the reference runs that row without it. Log gates near -20
    # decay the state by e^-20 per token.
    length, padded = 12, 6
    q, k, v, beta = delta_inputs(length)
    gate = gates(kind, length, low, min(low + 2.0, 0.0))
    start = torch.randn(BATCH, HEADS, DIM, DIM, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(3))
    mask = torch.ones(BATCH, length, dtype=torch.bool)
    mask[1, padded] = False
    q, k, v = (x.masked_fill(~mask[:, None, :, None], torch.nan) for x in (q, k, v))
    args = (q, k, v, gate) if op == "gated" else (q, k, v, beta, gate)
    step, chunked = STEPS[op]
    out, state = step_through(step, args, mask, start)

    op_out, op_state = chunked(*args, causal=True, mask=mask, initial_state=start,
                               return_state=True, chunk_size=5)
    assert_close_float64(out, op_out, length * DIM)
    assert_close_float64(state, op_state, length * DIM)
    assert (out[1, :, padded] == 0).all()
    for row in range(BATCH):
        real = mask[row].nonzero()[:, 0]
        ref_out, ref_state = recurrence(
            *(None if x is None else x[row:row + 1, :, real] for x in (q, k, v, gate)),
            None if op == "gated" else beta[row:row + 1, :, real], causal=True,
            initial_state=start[row:row + 1])
        assert_close_float64(out[row:row + 1, :, real], ref_out, length * DIM)
        assert_close_float64(state[row:row + 1], ref_state, length * DIM)


@pytest.mark.parametrize("op", ["gated", "delta"])
def test_steps_compute_in_float32_and_return_out_in_v_dtype(op):
    # As the op: bf16 inputs give a float32 state and a bf16 output; under autocast the step
    # still computes in float32 (the same numbers as without autocast).
    q, k, v, beta = (x.float() for x in delta_inputs(1))
    gate = gates("head", 1, -1.0, dtype=torch.float32)
    args = (q, k, v, gate) if op == "gated" else (q, k, v, beta, gate)
    step = STEPS[op][0]
    _, state = step(*args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_autocast, state_autocast = step(*args, initial_state=state)
    out_plain, state_plain = step(*args, initial_state=state)
    assert out_autocast.dtype == state_autocast.dtype == torch.float32
    torch.testing.assert_close(out_autocast, out_plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(state_autocast, state_plain, rtol=1e-6, atol=1e-6)
    out_half, state_half = step(*(x.bfloat16() for x in args), initial_state=state)
    assert (out_half.dtype, state_half.dtype) == (torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="one token"):
        step(*(x.expand(*x.shape[:2], 2, *x.shape[3:]) for x in args))
