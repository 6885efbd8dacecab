"""Mixed precision at long length, Performer's estimator and redraws, and input errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers.attention import FEATURE_MAP_VARIANTS, VARIANTS, build, inputs, padding_mask

from linarena.attention import (
    CosformerAttention,
    EluAttention,
    PerformerAttention,
    SoftmaxAttention,
)
from linarena.attention.engine.linear.naive import softmax_reference


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_autocast_long_sequence_is_finite_and_close_to_fp32(name, causal, dtype):
    """Length 8192, q/k norms around 30 (as trained models produce): half-precision sums of
    phi(k) overflow fp16 here, exp features overflow or underflow without stabilisers."""
    g = torch.Generator().manual_seed(0)
    shape = (1, 2, 8192, 64)
    q, k = (4.0 * torch.randn(shape, generator=g) for _ in range(2))
    v = torch.randn(shape, generator=g)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    attn = build(name, causal, head_dim=64, max_length=8192, chunk_size=None, heads=2)
    with torch.autocast("cpu", dtype=dtype):
        out = attn(q, k, v)
    exact = attn(q.float(), k.float(), v.float())
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    error = (out.float() - exact).abs()
    # Half precision rounds the output itself by up to 2^-9 (bf16) relative, and the inputs of its
    # sums as much: the error scales with the output's magnitude, which only a normalised output
    # (softmax, a denominator, a norm) keeps near 1 (a core with output_norm=none has none).
    magnitude = max(exact.abs().max().item(), 1.0)
    assert error.max() < 2e-2 * magnitude and error.mean() < 3e-3 * magnitude, (
        error.max(), error.mean(), magnitude)


@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
def test_state_and_normaliser_accumulate_in_fp32(name):
    attn = build(name, causal=True, head_dim=8, max_length=16)
    q = torch.randn(1, 2, 8, dtype=torch.bfloat16)
    out, state = attn.step(q, q, q)
    assert out.dtype == torch.bfloat16
    assert state.kv.dtype == torch.float32 and state.z.dtype == torch.float32


def test_performer_approaches_softmax_as_features_grow():
    g = torch.Generator().manual_seed(0)
    q, k, v = (0.5 * torch.randn(2, 2, 64, 16, generator=g, dtype=torch.float64) for _ in range(3))
    exact = softmax_reference(q, k, v)
    errors = []
    for m in (8, 64, 512, 4096):
        trials = [
            (PerformerAttention(16, num_features=m, seed=s)(q, k, v) - exact).abs().mean()
            for s in range(4)
        ]
        errors.append(torch.stack(trials).mean().item())
    assert all(a > b for a, b in itertools.pairwise(errors)), errors
    assert errors[-1] < 0.2 * errors[0], errors


def test_projection_is_orthogonal_blocks_reproducible_from_seed():
    a = PerformerAttention(16, num_features=40, seed=7)
    b = PerformerAttention(16, num_features=40, seed=7)
    c = PerformerAttention(16, num_features=40, seed=8)
    assert a.projection.shape == (40, 16)
    assert "feature_map.projection" in dict(a.named_buffers())
    assert torch.equal(a.projection, b.projection)
    assert not torch.equal(a.projection, c.projection)
    for start in (0, 16, 32):  # two full blocks and a partial one
        block = a.projection[start:start + 16]
        unit = block / block.norm(dim=1, keepdim=True)
        torch.testing.assert_close(unit @ unit.t(), torch.eye(len(block)), atol=1e-5, rtol=0)


def test_seedless_draw_follows_global_seed():
    torch.manual_seed(3)
    a = PerformerAttention(8, num_features=8)
    torch.manual_seed(3)
    b = PerformerAttention(8, num_features=8)
    c = PerformerAttention(8, num_features=8)
    assert torch.equal(a.projection, b.projection)
    assert not torch.equal(b.projection, c.projection)


def test_redraw_on_schedule_in_training_only():
    attn = PerformerAttention(8, num_features=16, redraw_interval=3, seed=1)
    x = torch.randn(1, 1, 5, 8)
    first = attn.projection.clone()
    attn.eval()
    for _ in range(5):
        attn(x, x, x)
    assert torch.equal(attn.projection, first)
    attn.train()
    attn(x, x, x)
    attn(x, x, x)
    assert torch.equal(attn.projection, first)
    attn(x, x, x)  # third training step: redraw number 1
    assert not torch.equal(attn.projection, first)
    assert torch.equal(attn.projection, attn.draw_projection(1))

    restored = PerformerAttention(8, num_features=16, redraw_interval=3, seed=99)
    restored.load_state_dict(attn.state_dict())
    assert restored.seed == 1 and restored.draws == 1 and restored.training_calls == 3
    assert torch.equal(restored.projection, attn.projection)


@pytest.mark.parametrize("causal", [False, True])
def test_redraw_before_backward_keeps_gradients(causal):
    """A second training forward (which redraws) before the first one's backward, as activation
    checkpointing does, leaves the first call's gradients those of its own projection."""
    q, k, v = (torch.randn(2, 2, 9, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))

    def grads(attn, redraw_in_between):
        out = attn(q, k, v)
        if redraw_in_between:
            attn(q, k, v)  # redraw_interval=1: this call redraws the projection
        return torch.autograd.grad(out.pow(2).sum(), (q, k, v))

    def make():
        return PerformerAttention(8, causal=causal, num_features=16, redraw_interval=1,
                                  seed=3, chunk_size=4).train()

    expected, got = grads(make(), False), grads(make(), True)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_no_redraw_without_interval():
    attn = PerformerAttention(8, num_features=16, seed=1).train()
    first = attn.projection.clone()
    x = torch.randn(1, 1, 5, 8)
    for _ in range(4):
        attn(x, x, x)
    assert torch.equal(attn.projection, first)


BAD_CALLS = [
    ("3 dims", lambda: (torch.randn(2, 5, 8),) * 3 + (None,), "batch, heads, length, head_dim"),
    ("length mismatch", lambda: (torch.randn(2, 1, 5, 8), torch.randn(2, 1, 6, 8),
                                 torch.randn(2, 1, 6, 8), None), "must share"),
    ("head_dim", lambda: (torch.randn(2, 1, 5, 4),) * 3 + (None,), "head_dim=8"),
    ("mask dtype", lambda: (torch.randn(2, 1, 5, 8),) * 3 + (torch.ones(2, 5),), "bool"),
    ("mask shape", lambda: (torch.randn(2, 1, 5, 8),) * 3
     + (torch.ones(2, 6, dtype=torch.bool),), r"\(batch, length\) = \(2, 5\)"),
]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize(("case", "args", "message"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_inputs_raise_clear_errors(name, case, args, message):
    attn = build(name, causal=False, head_dim=8)
    with pytest.raises(ValueError, match=message):
        attn(*args())


def test_cosformer_length_errors():
    with pytest.raises(ValueError, match="needs max_length"):
        CosformerAttention(8, causal=True)
    attn = CosformerAttention(8, causal=True, max_length=4)
    x = torch.randn(1, 1, 5, 8)
    with pytest.raises(ValueError, match="length 5 exceeds max_length=4"):
        attn(x, x, x)
    state = None
    for _ in range(4):
        _, state = attn.step(x[:, :, 0], x[:, :, 0], x[:, :, 0], state)
    with pytest.raises(ValueError, match="exceeds max_length=4"):
        attn.step(x[:, :, 0], x[:, :, 0], x[:, :, 0], state)


def test_performer_rejects_unknown_kernel_and_bidirectional_step():
    with pytest.raises(ValueError, match="kernel must be one of"):
        PerformerAttention(8, kernel="cosine")
    x = torch.randn(1, 1, 8)
    with pytest.raises(RuntimeError, match="causal=True"):
        EluAttention(8).step(x, x, x)


def test_causal_softmax_refuses_left_padding():
    """Causal softmax drops the key mask (the flash kernel takes none), which is exact only for
    right padding: a left-padded mask would let real queries attend to padded keys."""
    attn = SoftmaxAttention(8, causal=True)
    x = torch.randn(2, 1, 5, 8)
    right = torch.tensor([[True] * 5, [True, True, True, False, False]])
    attn(x, x, x, right)
    left = torch.tensor([[True] * 5, [False, False, True, True, True]])
    with pytest.raises(RuntimeError, match="right-padded"):
        attn(x, x, x, left)


def test_performer_checkpoints_from_before_the_feature_map_submodule_still_load():
    """Old state dicts have `projection` and the schedule state on the module itself."""
    attn = PerformerAttention(8, num_features=16, redraw_interval=3, seed=1).train()
    x = torch.randn(1, 1, 5, 8)
    for _ in range(3):
        attn(x, x, x)  # a redraw
    old_format = {key.removeprefix("feature_map."): value
                  for key, value in attn.state_dict().items()}
    assert "projection" in old_format and "_extra_state" in old_format
    restored = PerformerAttention(8, num_features=16, redraw_interval=3, seed=99)
    restored.load_state_dict(old_format)
    assert torch.equal(restored.projection, attn.projection)
    assert (restored.seed, restored.draws, restored.training_calls) == (1, 1, 3)


@pytest.mark.parametrize("name", VARIANTS)
def test_integer_inputs_are_refused(name):
    """Integer q, k, v used to come back as truncated integer outputs."""
    attn = build(name, causal=False, head_dim=8)
    x = torch.randint(0, 5, (1, 1, 4, 8))
    with pytest.raises(ValueError,
                       match=r"q must be a floating-point tensor, got dtype torch\.int64"):
        attn(x, x, x)


@pytest.mark.parametrize("name", VARIANTS)
def test_zero_head_dim_is_refused(name):
    with pytest.raises(ValueError, match="head_dim must be a positive integer, got 0"):
        build(name, causal=False, head_dim=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_nan_and_inf_in_padded_positions_never_reach_real_tokens(name, causal):
    q, k, v = inputs(batch=2, length=12)
    mask = padding_mask([12, 7], 12)
    attn = build(name, causal, max_length=64)
    clean = attn(q, k, v, mask)
    poisoned = [x.clone() for x in (q, k, v)]
    poisoned[1][1, :, 7:] = float("nan")
    poisoned[2][1, :, 7:] = float("inf")
    out = attn(*poisoned, mask)
    assert torch.equal(out[1, :, :7], clean[1, :, :7])
    assert torch.equal(out[0], clean[0])
