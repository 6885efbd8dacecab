"""The feature maps' chunked kernels (attention/engine/linear/) at chunk budgets small enough that a
short input spans several bidirectional chunks and several causal blocks of several chunks,
with a last partial chunk: outputs, gradients and the causal state against the float64
references; and a map with trainable parameters and no vjp, differentiated per chunk by
torch.func, gets its parameters' gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.attention import FEATURE_MAP_VARIANTS, build, inputs, padding_mask, quadratic_reference
from torch import Tensor, nn

from linarena.attention import FeatureMap, LinearAttention
from linarena.attention.engine import common

LENGTH = 37


@pytest.fixture(params=[300, 3000, 6000])
def small_chunks(request, monkeypatch):
    """CHUNK_FLOATS for chunks of a few tokens (2 x 3 heads x m features each; a causal block
    takes half). For m = 16: bidirectional chunks of 3, 31 and 62 tokens; causal blocks of one
    chunk of 8 tokens at 300 and 3000, of 3 chunks at 6000."""
    monkeypatch.setattr(common, "CHUNK_FLOATS", request.param)


def outputs_and_grads(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                      weights: Tensor, reference: bool) -> list[Tensor]:
    """out and d (out . weights) / d (q, k, v, the map's parameters) of attn or of its float64
    quadratic reference."""
    out = quadratic_reference(attn, q, k, v, mask) if reference else attn(q, k, v, mask)
    params = list(attn.parameters())
    return [out, *torch.autograd.grad((out * weights).sum(), [q, k, v, *params])]


def assert_same(attn: nn.Module, mask: Tensor | None) -> None:
    # float64 parameters too: a learned map's float32 weight gradients differ from the
    # reference's by their own rounding (a float32 ulp), far above this float64 tolerance.
    attn = attn.double()
    q, k, v = (x.requires_grad_(True) for x in inputs(length=LENGTH))
    weights = torch.randn(2, 3, LENGTH, q.shape[-1], dtype=torch.float64)
    if mask is not None:
        weights = weights * mask[:, None, :, None]  # padded queries' outputs are unused
    ours = outputs_and_grads(attn, q, k, v, mask, weights, reference=False)
    expected = outputs_and_grads(attn, q, k, v, mask, weights, reference=True)
    for a, b in zip(ours, expected, strict=True):
        if mask is not None and a.shape == weights.shape:
            a, b = a * (weights != 0), b * (weights != 0)
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
def test_many_chunks_match_the_float64_reference(small_chunks, name, causal, masked):
    assert_same(build(name, causal), padding_mask([LENGTH, 23], LENGTH) if masked else None)


@pytest.mark.parametrize("name", FEATURE_MAP_VARIANTS)
def test_the_causal_state_across_blocks_is_the_recurrent_one(small_chunks, name):
    attn = build(name, causal=True)
    q, k, v = inputs(length=LENGTH)
    _, state = attn(q, k, v, return_state=True)
    stepped = None
    for t in range(LENGTH):
        _, stepped = attn.step(q[:, :, t], k[:, :, t], v[:, :, t], stepped)
    for ours, expected in ((state.kv, stepped.kv), (state.z, stepped.z), (state.top, stepped.top)):
        torch.testing.assert_close(ours, expected, rtol=1e-7, atol=1e-9)
    assert state.position == stepped.position == LENGTH


class LearnedSoftplus(FeatureMap):
    """phi(x) = softplus(x * w), w a trainable weight per feature: a map with parameters and no
    vjp (float64, as the inputs, so that its gradient compares at float64's precision)."""

    def num_features(self, head_dim: int) -> int:
        return head_dim

    def setup(self, head_dim: int, causal: bool) -> None:
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, head_dim, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x * self.weight.to(x.dtype))


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_a_learned_map_gets_its_parameters_gradients(small_chunks, causal, masked):
    attn = LinearAttention(16, causal, feature_map=LearnedSoftplus(), chunk_size=8)
    assert_same(attn, padding_mask([LENGTH, 23], LENGTH) if masked else None)
