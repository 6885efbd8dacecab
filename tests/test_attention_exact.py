"""Every variant and mode against the float64 quadratic references, plus padding, causality,
the recurrent form and gradients."""

from __future__ import annotations

import pytest
import torch
from attention_reference import (
    cosformer_reference,
    elu_reference,
    performer_reference,
    softmax_reference,
)

from linarena.attention import (
    CosformerAttention,
    EluAttention,
    PerformerAttention,
    SoftmaxAttention,
)

HEAD_DIM = 16
VARIANTS = ["softmax", "elu", "performer", "performer_relu", "cosformer"]


def build(name: str, causal: bool, max_length: int = 64, chunk_size: int = 8):
    if name == "softmax":
        return SoftmaxAttention(HEAD_DIM, causal=causal)
    if name == "elu":
        return EluAttention(HEAD_DIM, causal=causal, chunk_size=chunk_size)
    if name.startswith("performer"):
        kernel = "relu" if name.endswith("relu") else "softmax"
        return PerformerAttention(
            HEAD_DIM, causal=causal, num_features=32, kernel=kernel, seed=0, chunk_size=chunk_size
        )
    return CosformerAttention(HEAD_DIM, causal=causal, max_length=max_length, chunk_size=chunk_size)


def reference(name: str, attn, q, k, v, mask, causal):
    if name == "softmax":
        return softmax_reference(q, k, v, mask, causal)
    if name == "elu":
        return elu_reference(q, k, v, mask, causal)
    if name.startswith("performer"):
        return performer_reference(q, k, v, attn.projection, attn.kernel, mask, causal)
    return cosformer_reference(q, k, v, mask, causal, max_length=attn.max_length)


def inputs(batch=2, heads=3, length=37, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(batch, heads, length, HEAD_DIM, generator=g, dtype=dtype)
            for _ in range(3)]


def padding_mask(lengths: list[int], length: int) -> torch.Tensor:
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("masked", [False, True])
def test_matches_float64_reference(name, causal, masked):
    q, k, v = inputs()
    mask = padding_mask([37, 23], 37) if masked else None
    attn = build(name, causal)
    out = attn(q, k, v, mask)
    expected = reference(name, attn, q, k, v, mask, causal)
    real = mask[:, None, :, None].expand_as(out) if masked else torch.ones_like(out, dtype=bool)
    torch.testing.assert_close(out[real], expected[real], rtol=1e-7, atol=1e-9)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_float32_close_to_reference(name, causal):
    q, k, v = inputs(dtype=torch.float32, length=150)
    mask = padding_mask([150, 97], 150)
    attn = build(name, causal, max_length=200, chunk_size=32)
    out = attn(q, k, v, mask)
    expected = reference(name, attn, q, k, v, mask, causal).float()
    torch.testing.assert_close(out[1, :, :97], expected[1, :, :97], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out[0], expected[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_padding_never_changes_real_outputs(name, causal):
    """A sequence padded with arbitrary junk gives the same real outputs as the bare sequence."""
    q, k, v = inputs(batch=1, length=20)
    attn = build(name, causal, max_length=64)
    bare = attn(q, k, v)
    junk = inputs(batch=1, length=11, seed=1, scale=50.0)
    padded = [torch.cat([t, j], dim=2) for t, j in zip((q, k, v), junk, strict=True)]
    out = attn(*padded, mask=padding_mask([20], 31))
    torch.testing.assert_close(out[:, :, :20], bare, rtol=1e-10, atol=1e-12)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_causal_outputs_ignore_the_future(name):
    """Changing tokens after t (even to huge values) leaves outputs up to t bit-identical:
    no stabiliser, normaliser or length statistic looks ahead."""
    q, k, v = inputs(batch=2, length=40, dtype=torch.float32)
    attn = build(name, causal=True, max_length=64, chunk_size=16)
    before = attn(q, k, v)
    t = 21  # inside a chunk, so intra-chunk masking is exercised
    changed = [x.clone() for x in (q, k, v)]
    for x in changed:
        x[:, :, t + 1:] = 30.0 * torch.randn_like(x[:, :, t + 1:])
    after = attn(*changed)
    assert torch.equal(before[:, :, : t + 1], after[:, :, : t + 1])
    assert not torch.equal(before[:, :, t + 1:], after[:, :, t + 1:])


@pytest.mark.parametrize("name", ["elu", "performer", "performer_relu", "cosformer"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_recurrent_step_equals_parallel_causal(name, dtype):
    q, k, v = inputs(batch=2, length=30, dtype=dtype, scale=2.0)
    attn = build(name, causal=True, max_length=30, chunk_size=8)
    parallel = attn(q, k, v)
    state, steps = None, []
    for i in range(30):
        out, state = attn.step(q[:, :, i], k[:, :, i], v[:, :, i], state)
        steps.append(out)
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(torch.stack(steps, dim=2), parallel, **tol)
    assert state.position == 30


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_gradcheck_float64(name, causal):
    q, k, v = (x.requires_grad_(True) for x in inputs(batch=2, heads=1, length=11))
    mask = padding_mask([11, 7], 11)
    attn = build(name, causal, max_length=16, chunk_size=4)
    # fast_mode checks the Jacobian along random directions: the same check, far fewer evaluations.
    assert torch.autograd.gradcheck(
        lambda a, b, c: attn(a, b, c, mask), (q, k, v), fast_mode=True, atol=1e-7, rtol=1e-5
    )


def test_bidirectional_chunking_matches_single_chunk(monkeypatch):
    """The chunked bidirectional kernel (and its recomputing backward) agrees with one chunk."""
    import linarena.attention.linear as linear

    q, k, v = (x.requires_grad_(True) for x in inputs(length=50))
    mask = padding_mask([50, 31], 50)
    attn = build("performer", causal=False)
    results = []
    for chunk in (7, 1024):
        monkeypatch.setattr(linear, "BIDIRECTIONAL_CHUNK", chunk)
        out = attn(q, k, v, mask)
        grads = torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v))
        results.append((out, *grads))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["elu", "performer", "performer_relu", "cosformer"])
def test_analytic_feature_backward_matches_autograd(name, monkeypatch):
    """The hand-written feature-map backward (elu+1, FAVOR+ with its key log-scale, relu
    features, cosFormer's cos/sin pairs) gives the gradients of autograd through the recomputed
    map: padded, over several chunks."""
    import linarena.attention.linear as linear

    monkeypatch.setattr(linear, "BIDIRECTIONAL_CHUNK", 7)
    q, k, v = (x.requires_grad_(True) for x in inputs(length=50, scale=2.0))
    mask = padding_mask([50, 31], 50)
    attn = build(name, causal=False)
    assert attn.feature_map.vjp(attn.feature_map.context(None, 1, 1, "cpu")) is not None
    results = []
    for _ in range(2):
        out = attn(q, k, v, mask)
        results.append(torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v)))
        monkeypatch.setattr(attn.feature_map, "vjp", lambda context: None)  # second pass: autograd
    for analytic, autograd in zip(*results, strict=True):
        torch.testing.assert_close(analytic, autograd, rtol=1e-10, atol=1e-12)
