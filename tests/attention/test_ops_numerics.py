"""Both ops: dtypes (float64 kept, half precision computed in float32), finite under fp16/bf16
autocast at 8K tokens, torch.compile, and one-line errors for bad arguments."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from linarena.attention.engine import delta_rule, gated_linear_attention


def case(op: str, length=16, dim=8, dtype=torch.float32, seed=0):
    """(args, kwargs) for one call of `op`: per-feature gates for GLA, per-head for the delta
    rule."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, length, dim, generator=g) for _ in range(3))
    if op == "gla":
        gate = F.logsigmoid(torch.randn(1, 2, length, dim, generator=g)) / 16
        return gated_linear_attention, tuple(x.to(dtype) for x in (q, k, v, gate))
    beta = torch.rand(1, 2, length, generator=g)
    gate = -0.1 * torch.rand(1, 2, length, generator=g)
    args = (q, F.normalize(k, dim=-1), v, beta, gate)
    return delta_rule, tuple(x.to(dtype) for x in args)


OPS = ["gla", "delta"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", OPS)
def test_half_inputs_are_computed_in_float32(op, dtype):
    fn, args = case(op, dtype=dtype)
    out, state = fn(*args, causal=True, return_state=True)
    assert out.dtype == dtype and state.dtype == torch.float32
    _, full = case(op, dtype=torch.float32)
    reference = fn(*(x.to(dtype).float() for x in full), causal=True)
    torch.testing.assert_close(out, reference.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", OPS)
def test_finite_under_autocast_at_8k(op, dtype):
    # Half-precision q, k, v, gates and beta, as linear layers under autocast give them.
    fn, args = case(op, length=8192, dim=16, dtype=dtype)
    args = [x.requires_grad_(True) for x in args]
    with torch.autocast("cpu", dtype=dtype):
        outs = [fn(*args, causal=causal) for causal in (True, False)]
    assert all(out.dtype == dtype and torch.isfinite(out).all() for out in outs)
    grads = torch.autograd.grad(sum(out.sum() for out in outs), args)
    assert all(torch.isfinite(g).all() for g in grads)


# Bidirectional calls trace the same chunk code twice (forward, reversed): slow, same coverage.
@pytest.mark.parametrize("causal", [True, pytest.param(False, marks=pytest.mark.slow)])
@pytest.mark.parametrize("op", OPS)
def test_compiles_as_one_graph_and_matches_eager(op, causal):
    torch._dynamo.reset()
    fn, args = case(op, length=21)
    args = [x.requires_grad_(True) for x in args]
    mask = torch.arange(21)[None, :] < 15
    results = []
    # Chunks of 18 tokens: two chunks, the second partial; per-feature gates in halves (padded
    # to 32 inside).
    for f in (torch.compile(fn, backend="aot_eager", fullgraph=True), fn):
        out = f(*args, causal=causal, mask=mask, chunk_size=18)
        results.append((out, *torch.autograd.grad((out * out.cos()).sum(), args)))
    torch._dynamo.reset()
    for c, e in zip(*results, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-6)


def test_integer_input_is_refused():
    with pytest.raises(TypeError, match="q must be a floating-point tensor"):
        gated_linear_attention(torch.ones(1, 1, 4, 2, dtype=torch.long), torch.ones(1, 1, 4, 2),
                               torch.ones(1, 1, 4, 2), causal=True)


def test_bad_gate_shape_is_refused():
    _, (q, k, v, beta, _) = case("delta")
    with pytest.raises(ValueError, match="log_gate must have shape"):
        delta_rule(q, k, v, beta, torch.zeros_like(q), causal=True)


def test_positive_log_gate_is_refused():
    _, (q, k, v, gate) = case("gla")
    with pytest.raises(RuntimeError, match="log_gate must be finite and <= 0"):
        gated_linear_attention(q, k, v, -gate, causal=True)


def test_a_log_gate_of_minus_infinity_is_refused():
    _, (q, k, v, gate) = case("gla")
    with pytest.raises(RuntimeError, match="log_gate must be finite and <= 0"):
        gated_linear_attention(q, k, v, torch.full_like(gate, -math.inf), causal=True)


def test_nan_gates_and_betas_give_nan_outputs_as_nan_weights_do():
    # Divergence is the trainer's to report: an op that raised here would crash the run instead.
    _, (q, k, v, gate) = case("gla")
    out = gated_linear_attention(q, k, v, torch.full_like(gate, math.nan), causal=True)
    assert out.isnan().any()
    _, (q, k, v, beta, gate) = case("delta")
    out = delta_rule(q, k, v, torch.full_like(beta, math.nan), gate, causal=True)
    assert out.isnan().any()


def test_state_needs_causal_mode():
    _, (q, k, v, gate) = case("gla")
    with pytest.raises(ValueError, match="need causal=True"):
        gated_linear_attention(q, k, v, gate, causal=False, return_state=True)


def saved_floats_per_token(fn, args, length: int) -> float:
    """What autograd keeps for the backward pass, in floats per token and head (each storage
    once)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes() // 4
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*(x.requires_grad_(True) for x in args), causal=True)
    return sum(storages.values()) / (length * args[0].shape[0] * args[0].shape[1])


@pytest.mark.parametrize("op", OPS)
def test_autograd_memory_is_linear_in_length_and_below_a_state_per_token(op):
    dim = 64
    per_token = [saved_floats_per_token(*case(op, length=n, dim=dim), length=n)
                 for n in (512, 1024)]
    assert per_token[1] <= 1.02 * per_token[0]
    assert per_token[1] < dim * dim / 2  # a k_dim x v_dim state per token would be dim * dim
