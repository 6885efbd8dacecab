"""delta_rule against the float64 token-by-token recurrence (DeltaNet, Gated DeltaNet): chunked
(WY / UT form) = reference for both modes and several chunk sizes; states, padding, causality,
gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.attention import assert_close_float64, padding_mask

from linarena.attention.engine import delta_rule
from linarena.attention.engine.gated.naive import recurrence

BATCH, HEADS, LENGTH, DIM = 2, 2, 37, 8


def inputs(length=LENGTH, dim=DIM, seed=0, gated=True, strength=0.5):
    """q, k (L2-normalised, as DeltaNet uses them), v, beta in (0, 1), per-head log gate."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(BATCH, HEADS, length, dim, generator=g, dtype=torch.float64)
               for _ in range(3))
    beta = torch.rand(BATCH, HEADS, length, generator=g, dtype=torch.float64)
    gate = -strength * torch.rand(BATCH, HEADS, length, generator=g, dtype=torch.float64)
    return q, F.normalize(k, dim=-1), v, beta, gate if gated else None


def terms(length=LENGTH, dim=DIM):
    return length * dim


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 64])
@pytest.mark.parametrize("strength", [0.05, 60.0])
@pytest.mark.parametrize("gated", [False, True])
def test_chunked_equals_recurrence(gated, strength, chunk_size, causal):
    q, k, v, beta, gate = inputs(gated=gated, strength=strength)
    out = delta_rule(q, k, v, beta, gate, causal=causal, chunk_size=chunk_size)
    expected, _ = recurrence(q, k, v, gate, beta, causal=causal)
    assert out.dtype == torch.float64
    assert_close_float64(out, expected, terms())


@pytest.mark.parametrize("gated", [False, True])
def test_unnormalised_keys_and_long_sequence(gated):
    q, k, v, beta, gate = inputs(length=150, gated=gated)
    k = 0.4 * k * torch.rand_like(k[..., :1])
    for causal in (True, False):
        out = delta_rule(q, k, v, beta, gate, causal=causal, scale=0.7)
        expected, _ = recurrence(q, k, v, gate, beta, causal=causal, scale=0.7)
        assert_close_float64(out, expected, terms(150))


@pytest.mark.parametrize("gated", [False, True])
def test_split_in_two_with_initial_state_equals_whole(gated):
    q, k, v, beta, gate = inputs(gated=gated)
    whole, state = delta_rule(q, k, v, beta, gate, causal=True, chunk_size=8, return_state=True)
    _, expected_state = recurrence(q, k, v, gate, beta, causal=True)
    assert state.shape == (BATCH, HEADS, DIM, DIM) and state.dtype == torch.float64
    assert_close_float64(state, expected_state, terms())
    cut = 20

    def part(x, lo, hi):
        return None if x is None else x[:, :, lo:hi]

    first, mid = delta_rule(*(part(x, 0, cut) for x in (q, k, v, beta, gate)), causal=True,
                            chunk_size=8, return_state=True)
    second, end = delta_rule(*(part(x, cut, LENGTH) for x in (q, k, v, beta, gate)),
                             causal=True, chunk_size=8, initial_state=mid, return_state=True)
    assert_close_float64(torch.cat([first, second], dim=2), whole, terms())
    assert_close_float64(end, state, terms())


def test_initial_state_equals_reference():
    q, k, v, beta, gate = inputs()
    start = torch.randn(BATCH, HEADS, DIM, DIM, dtype=torch.float64)
    out, state = delta_rule(q, k, v, beta, gate, causal=True, chunk_size=8,
                            initial_state=start, return_state=True)
    expected, expected_state = recurrence(q, k, v, gate, beta, causal=True, initial_state=start)
    assert_close_float64(out, expected, terms())
    assert_close_float64(state, expected_state, terms())


@pytest.mark.parametrize("causal", [True, False])
def test_padded_tokens_change_nothing_and_nan_does_not_leak(causal):
    q, k, v, beta, gate = inputs()
    lengths = [LENGTH, 23]
    mask = padding_mask(lengths, LENGTH)
    junk = [x.clone() for x in (q, k, v, beta, gate)]
    for x in junk:
        x[1, :, 23:] = torch.nan
    out = delta_rule(*junk, causal=causal, mask=mask, chunk_size=8)
    assert torch.isfinite(out).all()
    for b, n in enumerate(lengths):
        alone = delta_rule(*(x[b:b + 1, :, :n] for x in (q, k, v, beta, gate)), causal=causal,
                           chunk_size=8)
        assert_close_float64(out[b:b + 1, :, :n], alone, terms())
    _, state = delta_rule(*junk, causal=True, mask=mask, return_state=True)
    _, alone = delta_rule(*(x[1:, :, :23] for x in (q, k, v, beta, gate)), causal=True,
                          return_state=True)
    assert_close_float64(state[1:], alone, terms())


def test_no_future_token_changes_a_past_output():
    q, k, v, beta, gate = inputs()
    out = delta_rule(q, k, v, beta, gate, causal=True, chunk_size=8)
    t = 19
    changed = [x.clone() for x in (q, k, v, beta, gate)]
    for x in changed[:3]:
        x[:, :, t + 1:] = 100 * torch.randn_like(x[:, :, t + 1:])
    changed[3][:, :, t + 1:] = 0.99
    changed[4][:, :, t + 1:] = -3.0
    out2 = delta_rule(*changed, causal=True, chunk_size=8)
    assert_close_float64(out2[:, :, :t + 1], out[:, :, :t + 1], terms())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gated", [False, True])
def test_gradcheck(gated, causal):
    q, k, v, beta, gate = inputs(length=11, dim=4, gated=gated)
    # beta inside (0, 1) and log gates below 0 by more than gradcheck's perturbation.
    beta = 0.1 + 0.8 * beta
    gate = None if gate is None else gate - 0.1
    args = [x.requires_grad_(True) for x in (q, k, v, beta, gate) if x is not None]

    def fn(*xs):
        return delta_rule(*xs, causal=causal, chunk_size=4)

    assert torch.autograd.gradcheck(fn, tuple(args), fast_mode=True)
