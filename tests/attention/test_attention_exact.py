"""Every variant of conf/attention/ and both modes against a float64 quadratic reference, plus
padding, causality, the recurrent form and gradients; the built-in variants also against the
papers' formulas (linarena/attention/engine/linear/naive.py)."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import (
    FEATURE_MAP_VARIANTS,
    HEAD_DIM,
    LINEAR_VARIANTS,
    VARIANTS,
    assert_close_float64,
    build,
    inputs,
    padding_mask,
    quadratic_reference,
)

from linarena.attention import (
    CosformerAttention,
    EluAttention,
    PerformerAttention,
    SoftmaxAttention,
)
from linarena.attention.engine.linear.naive import (
    cosformer_reference,
    elu_reference,
    performer_reference,
    softmax_reference,
)


def _has_analytic_backward(name: str) -> bool:
    feature_map = build(name, causal=False).feature_map
    return feature_map.vjp(feature_map.context(None, 1, 1, "cpu")) is not None


def _terms(attn, length: int) -> int:
    """Products summed into one output element: length x feature width (head_dim for softmax)."""
    features = getattr(attn, "feature_map", None)
    return length * (features.num_features(HEAD_DIM) if features is not None else HEAD_DIM)


ANALYTIC = [name for name in FEATURE_MAP_VARIANTS if _has_analytic_backward(name)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("masked", [False, True])
def test_matches_float64_reference(name, causal, masked):
    q, k, v = inputs()
    mask = padding_mask([37, 23], 37) if masked else None
    attn = build(name, causal)
    out = attn(q, k, v, mask)
    expected = quadratic_reference(attn, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out) if masked else torch.ones_like(out, dtype=bool)
    torch.testing.assert_close(out[real], expected[real], rtol=1e-7, atol=1e-9)
    assert torch.isfinite(out).all()


# The papers' formulas, written apart from the kernels (linarena.attention.engine.linear.naive).
BUILTINS = {
    "softmax": (lambda c: SoftmaxAttention(HEAD_DIM, causal=c),
                lambda a, q, k, v, m: softmax_reference(q, k, v, m, a.causal)),
    "elu": (lambda c: EluAttention(HEAD_DIM, causal=c, chunk_size=8),
            lambda a, q, k, v, m: elu_reference(q, k, v, m, a.causal)),
    "performer": (lambda c: PerformerAttention(HEAD_DIM, causal=c, num_features=32, seed=0,
                                               chunk_size=8),
                  lambda a, q, k, v, m: performer_reference(q, k, v, a.projection, "softmax",
                                                            m, a.causal)),
    "performer_relu": (lambda c: PerformerAttention(HEAD_DIM, causal=c, num_features=32,
                                                    kernel="relu", seed=0, chunk_size=8),
                       lambda a, q, k, v, m: performer_reference(q, k, v, a.projection, "relu",
                                                                 m, a.causal)),
    "cosformer": (lambda c: CosformerAttention(HEAD_DIM, causal=c, max_length=64, chunk_size=8),
                  lambda a, q, k, v, m: cosformer_reference(q, k, v, m, a.causal, 64)),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_variants_match_the_papers_formulas(name, causal):
    q, k, v = inputs()
    mask = padding_mask([37, 23], 37)
    make, reference = BUILTINS[name]
    attn = make(causal)
    out, expected = attn(q, k, v, mask), reference(attn, q, k, v, mask)
    real = mask[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[real], expected[real], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
def test_float32_close_to_reference(name, causal):
    q, k, v = inputs(dtype=torch.float32, length=150)
    mask = padding_mask([150, 97], 150)
    attn = build(name, causal, max_length=200, chunk_size=32)
    out = attn(q, k, v, mask)
    expected = quadratic_reference(attn, q, k, v, mask).float()
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
    assert_close_float64(out[:, :, :20], bare, _terms(attn, 31))
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


@pytest.mark.parametrize("name", LINEAR_VARIANTS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_recurrent_step_equals_parallel_causal(name, dtype):
    q, k, v = inputs(batch=2, length=30, dtype=dtype, scale=2.0)
    attn = build(name, causal=True, max_length=30, chunk_size=8)
    parallel = attn(q, k, v)
    state, steps = None, []
    for i in range(30):
        out, state = attn.step(q[:, :, i], k[:, :, i], v[:, :, i], state)
        steps.append(out)
    if dtype == torch.float64:
        assert_close_float64(torch.stack(steps, dim=2), parallel, _terms(attn, 30))
    else:
        torch.testing.assert_close(torch.stack(steps, dim=2), parallel, rtol=1e-4, atol=1e-5)
    assert state.position == 30


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_gradcheck_float64(name, causal):
    q, k, v = (x.requires_grad_(True) for x in inputs(batch=2, heads=1, length=11))
    mask = padding_mask([11, 7], 11)
    attn = build(name, causal, max_length=16, chunk_size=4, heads=1)
    # fast_mode checks the Jacobian along random directions: the same check, far fewer evaluations.
    assert torch.autograd.gradcheck(
        lambda a, b, c: attn(a, b, c, mask), (q, k, v), fast_mode=True, atol=1e-7, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ANALYTIC)
def test_analytic_feature_backward_matches_autograd(name, causal, monkeypatch):
    """A map's hand-written backward (elu+1, FAVOR+ with its log-scales, cosFormer's cos/sin
    pairs) gives the gradients of autograd through the map: padded, both modes."""
    q, k, v = (x.requires_grad_(True) for x in inputs(length=50, scale=2.0))
    mask = padding_mask([50, 31], 50)
    attn = build(name, causal=causal)
    results = []
    for _ in range(2):
        out = attn(q, k, v, mask)
        results.append(torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v)))
        monkeypatch.setattr(attn.feature_map, "vjp", lambda context: None)  # second pass: autograd
    for analytic, autograd in zip(*results, strict=True):
        assert_close_float64(analytic, autograd, _terms(attn, 50))


def test_performer_relu_analytic_backward_matches_autograd(monkeypatch):
    """The relu Performer (a constructor option, not a config file) has its own backward."""
    q, k, v = (x.requires_grad_(True) for x in inputs(length=50, scale=2.0))
    attn = BUILTINS["performer_relu"][0](False)
    results = []
    for _ in range(2):
        out = attn(q, k, v, padding_mask([50, 31], 50))
        results.append(torch.autograd.grad((out * torch.cos(out)).sum(), (q, k, v)))
        monkeypatch.setattr(attn.feature_map, "vjp", lambda context: None)
    for analytic, autograd in zip(*results, strict=True):
        assert_close_float64(analytic, autograd, _terms(attn, 50))


def test_taylor_expands_the_first_feature_dim_components_as_based_does():
    """Based projects q and k straight to feature_dim (16) and keeps v head_dim wide: the map
    has no projection of its own and reads the first 16 components of each head's q and k."""
    attn = build("taylor", causal=False, head_dim=32)
    assert attn.feature_map.num_features(32) == 1 + 16 + 16 * 16
    assert not list(attn.feature_map.parameters())
    q, k, v = inputs(head_dim=32)
    changed = [x.clone() for x in (q, k)]
    for x in changed:
        x[..., 16:] = torch.randn_like(x[..., 16:])
    torch.testing.assert_close(attn(*changed, v), attn(q, k, v), rtol=0, atol=0)
    t = (q[..., :16] @ k[..., :16].transpose(-1, -2)) / 4.0  # q . k / sqrt(16)
    weights = 1 + t + t**2 / 2
    expected = weights @ v / (weights.sum(-1, keepdim=True) + attn.eps)
    assert_close_float64(attn(q, k, v), expected, 37 * 273)


@pytest.mark.parametrize("causal", [False, True])
def test_performer_is_exact_favor_at_large_query_norms(causal):
    """At |q|, |k| about 24 (head_dim 16) most FAVOR+ normalisers lie far below 1e-10 (down to
    1e-77): a fixed eps, in the stabilised frame (as before) or in the true one, moved outputs
    by up to 2.5 from the exact (unstabilised, float64) estimator."""
    q, k, v = inputs(batch=4, heads=2, length=64)
    q, k = 6.0 * q, 6.0 * k
    attn = PerformerAttention(HEAD_DIM, causal=causal, num_features=256, seed=0, chunk_size=16)
    expected = performer_reference(q, k, v, attn.projection, "softmax", None, causal)
    assert_close_float64(attn(q, k, v), expected, 64 * 256)


@pytest.mark.parametrize("causal", [False, True])
def test_eps_is_added_to_the_true_normaliser(causal):
    """Whatever the stabilisers (Performer's query and key log-scales), eps means the same: it
    is added to the true FAVOR+ normaliser, here of the order of 1e-2 .. 1e2."""
    q, k, v = inputs(batch=2, heads=2, length=40, scale=2.0)
    eps = 1e-1
    attn = PerformerAttention(HEAD_DIM, causal=causal, num_features=64, seed=0, chunk_size=16,
                              eps=eps)
    expected = performer_reference(q, k, v, attn.projection, "softmax", None, causal, eps=eps)
    assert_close_float64(attn(q, k, v), expected, 40 * 64)
    q1, k1, v1 = (x[:, :, 0] for x in (q, k, v))
    if causal:
        out, _ = attn.step(q1, k1, v1)
        assert_close_float64(out, expected[:, :, 0], 64)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_through_eps_on_the_true_normaliser(causal):
    """With eps > 0 the output depends on the query's log-scale too (through eps): gradcheck
    covers that path, which the default Performer (eps = 0) never takes."""
    q, k, v = (x.requires_grad_(True) for x in inputs(batch=2, heads=1, length=11, scale=2.0))
    mask = padding_mask([11, 7], 11)
    attn = PerformerAttention(HEAD_DIM, causal=causal, num_features=16, seed=0, chunk_size=4,
                              eps=1.0)
    assert torch.autograd.gradcheck(
        lambda a, b, c: attn(a, b, c, mask), (q, k, v), fast_mode=True, atol=1e-7, rtol=1e-5
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_carries_a_non_finite_real_query_into_its_row_only(causal, masked, bad):
    """A NaN (or inf) in a real query makes that query's output NaN, as in the float64
    reference and every other core, not the zeros PyTorch's CPU kernel returns; the other rows
    stay those of the reference."""
    q, k, v = inputs(dtype=torch.float32, length=9)
    q[0, 1, 4, 3] = bad
    mask = padding_mask([9, 6], 9) if masked else None
    out = SoftmaxAttention(HEAD_DIM, causal)(q, k, v, mask)
    expected = softmax_reference(q.double(), k.double(), v.double(), mask, causal)
    assert out[0, 1, 4].isnan().all() and expected[0, 1, 4].isnan().all()
    others = torch.ones(out.shape[:3], dtype=torch.bool)
    others[0, 1, 4] = False
    if masked:
        others &= mask[:, None, :]
    torch.testing.assert_close(out[others].double(), expected[others], atol=1e-5, rtol=1e-5)
