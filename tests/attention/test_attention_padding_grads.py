"""Padding is exact in the backward pass too: NaN or Inf at the padded positions of q, k, v (or of
the token x a gated core reads) changes no gradient of a real token or of a parameter, for every
variant of conf/attention/ in both modes; and a call with no tokens (N = 0) returns an empty
output, for the modules and for the functional ops."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import (
    HEAD_DIM,
    HEADS,
    LINEAR_VARIANTS,
    VARIANTS,
    assert_close_float64,
    build,
    core,
    inputs,
    padding_mask,
)
from torch import Tensor, nn

from linarena.attention.engine import delta_rule, gated_linear_attention

BATCH, LENGTH = 2, 12
REAL = [LENGTH, 7]  # the second sequence has 5 padded positions
POISONS = {"nan": float("nan"), "inf": float("inf")}


def _reads_token(attn: nn.Module) -> bool:
    return getattr(core(attn), "reads_token", False)


def _input_names(name: str) -> tuple[str, ...]:
    """The inputs of the variant's module: q, k, v, and x for a core that reads the token."""
    return ("q", "k", "v", "x") if _reads_token(build(name, causal=False)) else ("q", "k", "v")


CASES = [(name, which) for name in VARIANTS for which in _input_names(name)]


def _tensors(attn: nn.Module, length: int) -> list[Tensor]:
    """float64 q, k, v (batch, heads, length, head_dim), and x (batch, length, heads * head_dim)
    for a core that reads the token: an input of its own, not q with its heads side by side."""
    tensors = inputs(batch=BATCH, length=length)
    if _reads_token(attn):
        g = torch.Generator().manual_seed(5)
        tensors.append(torch.randn(BATCH, length, HEADS * HEAD_DIM, generator=g,
                                   dtype=torch.float64))
    return tensors


def _call(attn: nn.Module, tensors: list[Tensor], mask: Tensor | None, **options) -> Tensor:
    """attn on q, k, v; a core that reads the token is called itself, with x= the fourth tensor."""
    if _reads_token(attn):
        q, k, v, x = tensors
        return core(attn)(q, k, v, mask, x=x, **options)
    return attn(*tensors, mask, **options)


def _padded(t: Tensor, mask: Tensor) -> Tensor:
    """Where t, (batch, heads, length, dim) or x (batch, length, d_model), is padding."""
    return ~mask[:, None, :, None] if t.dim() == 4 else ~mask[..., None]


def _terms(attn: nn.Module) -> int:
    """Products summed into one element of an output or a gradient: length x the width of the
    state (the features of a feature map, head_dim (+1 for a denominator column) otherwise)."""
    attn = core(attn)
    if hasattr(attn, "feature_map"):
        return LENGTH * attn.feature_map.num_features(HEAD_DIM)
    return LENGTH * (HEAD_DIM + 1)


def _outputs_and_gradients(
    attn: nn.Module, tensors: list[Tensor], mask: Tensor
) -> tuple[Tensor, list[Tensor | None]]:
    """The output and the gradients, of every input and every parameter, of a loss that reads
    the real positions only (a fixed random weighting of them)."""
    tensors = [t.detach().requires_grad_(True) for t in tensors]
    params = [p for p in attn.parameters() if p.requires_grad]
    out = _call(attn, tensors, mask)
    real = mask[:, None, :, None].expand_as(out)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9),
                          dtype=out.dtype)
    loss = (out[real] * weights[real]).sum()
    return out, list(torch.autograd.grad(loss, tensors + params, allow_unused=True))


@pytest.mark.parametrize("poison", list(POISONS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("name", "which"), CASES)
def test_nonfinite_padding_changes_no_gradient(name, which, causal, poison):
    """Every gradient (inputs, real and padded positions, and parameters) is finite and that of
    the same batch with zeros at the padded positions; real outputs are those too."""
    attn = build(name, causal, max_length=64).double()
    mask = padding_mask(REAL, LENGTH)
    clean = [t.masked_fill(_padded(t, mask), 0.0) for t in _tensors(attn, LENGTH)]
    poisoned = list(clean)
    index = _input_names(name).index(which)
    poisoned[index] = clean[index].masked_fill(_padded(clean[index], mask), POISONS[poison])

    expected_out, expected = _outputs_and_gradients(attn, clean, mask)
    out, got = _outputs_and_gradients(attn, poisoned, mask)

    real = mask[:, None, :, None].expand_as(out)
    assert torch.equal(out[real], expected_out[real])
    labels = [*_input_names(name), *(f"parameter {n}" for n, p in attn.named_parameters()
                                      if p.requires_grad)]
    assert [g is None for g in got] == [e is None for e in expected]
    nonfinite = [label for label, g in zip(labels, got, strict=True)
                 if g is not None and not torch.isfinite(g).all()]
    assert not nonfinite, f"{poison} in padded {which}: non-finite gradients of {nonfinite}"
    for g, e in zip(got, expected, strict=True):
        if e is not None:
            assert_close_float64(g, e, _terms(attn))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_no_tokens_give_an_empty_output(name, causal, masked):
    """N = 0: an empty output (batch, heads, 0, head_dim) in the inputs' dtype, and a backward
    through it runs, every gradient it gives zero (a sum over no tokens)."""
    attn = build(name, causal, max_length=64).double()
    tensors = [t.requires_grad_(True) for t in _tensors(attn, 0)]
    mask = padding_mask([0] * BATCH, 0) if masked else None
    out = _call(attn, tensors, mask)
    assert out.shape == (BATCH, HEADS, 0, HEAD_DIM)
    assert out.dtype == torch.float64
    out.sum().backward()
    for t in [*tensors, *attn.parameters()]:
        assert t.grad is None or not t.grad.any()


def _state_tensors(state) -> tuple[Tensor, ...]:
    """The tensors of a LinearAttentionState (kv, z, top) or a RecurrentState (state)."""
    return (state.kv, state.z, state.top) if hasattr(state, "kv") else (state.state,)


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
def test_no_tokens_leave_the_causal_state_as_it_was(name):
    """N = 0 with return_state: the state given back is the one passed in, or the state before
    any token when none was, from which the next call starts as from nothing."""
    attn = build(name, causal=True, max_length=64).double()
    tensors = _tensors(attn, LENGTH)
    empty = [t[..., :0, :] for t in tensors]
    _, state = _call(attn, tensors, None, return_state=True)
    out, after = _call(attn, empty, None, initial_state=state, return_state=True)
    assert out.shape == (BATCH, HEADS, 0, HEAD_DIM)
    assert after.position == state.position == LENGTH
    for a, b in zip(_state_tensors(after), _state_tensors(state), strict=True):
        assert torch.equal(a, b)

    _, fresh = _call(attn, empty, None, return_state=True)
    assert fresh.position == 0
    continued = _call(attn, tensors, None, initial_state=fresh)
    torch.testing.assert_close(continued, _call(attn, tensors, None), rtol=0, atol=0)


OPS = {
    "gated_linear_attention": lambda q, k, v, **kw: gated_linear_attention(
        q, k, v, -torch.rand(q.shape[:3], dtype=q.dtype), **kw),
    "delta_rule": lambda q, k, v, **kw: delta_rule(
        q, k, v, torch.rand(q.shape[:3], dtype=q.dtype), -torch.rand(q.shape[:3], dtype=q.dtype),
        **kw),
}


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("op", list(OPS))
def test_ops_with_no_tokens_give_an_empty_output(op, causal, masked):
    """N = 0: out (batch, heads, 0, v_dim); causal, the state is the initial one (zeros if
    None)."""
    q, k = (torch.randn(BATCH, HEADS, 0, 4, dtype=torch.float64) for _ in range(2))
    v = torch.randn(BATCH, HEADS, 0, 5, dtype=torch.float64, requires_grad=True)
    mask = padding_mask([0] * BATCH, 0) if masked else None
    out = OPS[op](q, k, v, causal=causal, mask=mask)
    assert out.shape == (BATCH, HEADS, 0, 5) and out.dtype == torch.float64
    out.sum().backward()
    if causal:
        start = torch.randn(BATCH, HEADS, 4, 5, dtype=torch.float64)
        _, state = OPS[op](q, k, v, causal=True, mask=mask, initial_state=start,
                           return_state=True)
        assert torch.equal(state, start)
        _, state = OPS[op](q, k, v, causal=True, mask=mask, return_state=True)
        assert state.shape == (BATCH, HEADS, 4, 5) and not state.any()


@pytest.mark.parametrize("op", list(OPS))
def test_ops_refuse_an_empty_key_dimension(op):
    """k_dim = 0 has no default scale (k_dim ** -0.5): a ValueError that says so."""
    q, k = (torch.randn(BATCH, HEADS, 6, 0, dtype=torch.float64) for _ in range(2))
    v = torch.randn(BATCH, HEADS, 6, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"k_dim must be at least 1, got q .*\(2, 3, 6, 0\)"):
        OPS[op](q, k, v, causal=True)
