"""gated_linear_attention against the float64 quadratic form with the decay matrix D: chunked =
reference for every gate kind, decay strength and chunk size, both modes; states, padding,
causality and gradients."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import assert_close_float64, padding_mask

from linarena.attention.engine import gated_linear_attention
from linarena.attention.engine.gated.naive import gla_quadratic, recurrence

BATCH, HEADS, LENGTH, DIM = 2, 2, 37, 8


def qkv(length=LENGTH, dim=DIM, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(BATCH, HEADS, length, dim, generator=g, dtype=dtype) for _ in range(3)]


def log_gate(kind: str, strength: float, length=LENGTH, dim=DIM, seed=1):
    """None, per head (b, h, n) or per feature (b, h, n, dim), values in (-strength, 0)."""
    if kind == "none":
        return None
    g = torch.Generator().manual_seed(seed)
    shape = (BATCH, HEADS, length) + ((dim,) if kind == "feature" else ())
    return -strength * torch.rand(*shape, generator=g, dtype=torch.float64)


def terms(length=LENGTH, dim=DIM):
    return length * dim


# Strong decay: log gates down to -60 per token, so a chunk's summed log decay passes -709 and
# a factorisation exp(G_i) * exp(-G_j) over a whole chunk would overflow float64.
STRENGTHS = [0.05, 60.0]
GATES = ["none", "head", "feature"]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 32, 48, 64])
@pytest.mark.parametrize("strength", STRENGTHS)
@pytest.mark.parametrize("kind", GATES)
def test_chunked_equals_quadratic_reference(kind, strength, chunk_size, causal):
    q, k, v = qkv()
    gate = log_gate(kind, strength)
    out = gated_linear_attention(q, k, v, gate, causal=causal, chunk_size=chunk_size)
    assert out.dtype == torch.float64
    assert_close_float64(out, gla_quadratic(q, k, v, gate, causal=causal), terms())


@pytest.mark.parametrize("kind", GATES)
def test_long_sequence_with_sub_chunks_equals_reference(kind):
    # 150 tokens: three chunks of 64 (the last partial), per-feature gates in halves down to
    # 4-token leaves.
    q, k, v = qkv(length=150)
    gate = log_gate(kind, 2.0, length=150)
    for causal in (True, False):
        out = gated_linear_attention(q, k, v, gate, causal=causal)
        assert_close_float64(out, gla_quadratic(q, k, v, gate, causal=causal), terms(150))


def test_explicit_scale_and_value_width():
    q, k, _ = qkv()
    v = torch.randn(BATCH, HEADS, LENGTH, 5, dtype=torch.float64)
    gate = log_gate("feature", 1.0)
    out = gated_linear_attention(q, k, v, gate, causal=False, scale=0.3, chunk_size=16)
    assert_close_float64(out, gla_quadratic(q, k, v, gate, causal=False, scale=0.3), terms())


@pytest.mark.parametrize("kind", GATES)
def test_split_in_two_with_initial_state_equals_whole(kind):
    q, k, v = qkv()
    gate = log_gate(kind, 0.5)
    whole, state = gated_linear_attention(q, k, v, gate, causal=True, chunk_size=8,
                                          return_state=True)
    _, expected_state = recurrence(q, k, v, gate, causal=True)
    assert state.shape == (BATCH, HEADS, DIM, DIM) and state.dtype == torch.float64
    assert_close_float64(state, expected_state, terms())
    cut = 20
    first, mid = gated_linear_attention(
        q[:, :, :cut], k[:, :, :cut], v[:, :, :cut],
        None if gate is None else gate[:, :, :cut], causal=True, chunk_size=8, return_state=True)
    second, end = gated_linear_attention(
        q[:, :, cut:], k[:, :, cut:], v[:, :, cut:],
        None if gate is None else gate[:, :, cut:], causal=True, chunk_size=8,
        initial_state=mid, return_state=True)
    assert_close_float64(torch.cat([first, second], dim=2), whole, terms())
    assert_close_float64(end, state, terms())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", GATES)
def test_padded_tokens_change_nothing_and_nan_does_not_leak(kind, causal):
    q, k, v = qkv()
    gate = log_gate(kind, 0.5)
    lengths = [LENGTH, 23]
    mask = padding_mask(lengths, LENGTH)
    junk = [x.clone() for x in (q, k, v, gate if gate is not None else q[..., 0])]
    for x in junk:
        x[1, :, 23:] = torch.nan
    gate_junk = junk[3] if gate is not None else None
    out = gated_linear_attention(*junk[:3], gate_junk, causal=causal, mask=mask, chunk_size=8)
    for b, n in enumerate(lengths):
        alone = gated_linear_attention(
            q[b:b + 1, :, :n], k[b:b + 1, :, :n], v[b:b + 1, :, :n],
            None if gate is None else gate[b:b + 1, :, :n], causal=causal, chunk_size=8)
        assert_close_float64(out[b:b + 1, :, :n], alone, terms())
    assert torch.isfinite(out).all()


def test_padded_tokens_do_not_enter_the_state():
    q, k, v = qkv()
    gate = log_gate("feature", 0.5)
    mask = padding_mask([LENGTH, 23], LENGTH)
    _, state = gated_linear_attention(q, k, v, gate, causal=True, mask=mask, return_state=True)
    _, alone = gated_linear_attention(q[1:, :, :23], k[1:, :, :23], v[1:, :, :23],
                                      gate[1:, :, :23], causal=True, return_state=True)
    assert_close_float64(state[1:], alone, terms())


@pytest.mark.parametrize("kind", GATES)
def test_no_future_token_changes_a_past_output(kind):
    q, k, v = qkv()
    gate = log_gate(kind, 0.5)
    out = gated_linear_attention(q, k, v, gate, causal=True, chunk_size=8)
    t = 19
    changed = [x.clone() for x in (q, k, v)]
    for x in changed:
        x[:, :, t + 1:] = 100 * torch.randn_like(x[:, :, t + 1:])
    gate2 = None if gate is None else gate.clone()
    if gate2 is not None:
        gate2[:, :, t + 1:] = -3.0
    out2 = gated_linear_attention(*changed, gate2, causal=True, chunk_size=8)
    assert_close_float64(out2[:, :, :t + 1], out[:, :, :t + 1], terms())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", GATES)
def test_gradcheck(kind, causal):
    q, k, v = (x.requires_grad_(True) for x in qkv(length=11, dim=4))
    # Log gates well inside (-inf, 0): gradcheck's perturbations keep them <= 0.
    gate = log_gate(kind, 0.5, length=11, dim=4)
    gate = None if gate is None else (gate - 0.1).requires_grad_(True)
    args = (q, k, v) if gate is None else (q, k, v, gate)

    def fn(*xs):
        return gated_linear_attention(*xs, causal=causal, chunk_size=4)

    assert torch.autograd.gradcheck(fn, args, fast_mode=True)
