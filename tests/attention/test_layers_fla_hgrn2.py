"""The HGRN2 layer (attention=hgrn2_layer) against flash-linear-attention 0.6.0's
fla.layers.HGRN2Attention: the same sizes, fla's weights copied one to one (the parameter names
are the same), float64 on both sides, causal, 150 tokens (ours: chunks of 64, so the state
crosses two chunk boundaries). Outputs and the gradients of x and of every parameter agree to
float64 rounding.

fla's Triton calls do not run on CPU: its GLA kernels (fused_recurrent_gla for up to 64
tokens, chunk_gla beyond), its swish and its fused rms_norm_linear are replaced (pytest's
monkeypatch) by their formulas written out in the input's dtype: S_t = diag(exp(gk_t)) S_{t-1}
+ k_t v_t^T, o_t = scale S_t^T q_t with fla's default scale 1/sqrt(k_dim) (fla's
naive_recurrent_gla, which rounds to float32), x sigmoid(x), and RMSNorm(o) weight then the
output projection. fla's layer is causal only."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import build_layer
from helpers.fla_reference import assert_same_in_float64, gla_in_dtype

fla_hgrn2 = pytest.importorskip("fla.layers.hgrn2")

D_MODEL, HEADS = 32, 2


@pytest.fixture
def fla_on_cpu_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    def rms_norm_linear(x, norm_weight, norm_bias, weight, bias=None, eps=1e-5, **_):
        assert norm_bias is None and bias is None
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
        return torch.nn.functional.linear(normed, weight)

    monkeypatch.setattr(fla_hgrn2, "fused_recurrent_gla", gla_in_dtype)
    monkeypatch.setattr(fla_hgrn2, "chunk_gla", gla_in_dtype)
    monkeypatch.setattr(fla_hgrn2, "swish", torch.nn.functional.silu)
    monkeypatch.setattr(fla_hgrn2, "rms_norm_linear", rms_norm_linear)


def test_the_hgrn2_layer_is_fla_s_in_float64(fla_on_cpu_float64: None) -> None:
    torch.manual_seed(0)
    theirs = fla_hgrn2.HGRN2Attention(hidden_size=D_MODEL, num_heads=HEADS, expand_ratio=None)
    ours = build_layer("hgrn2_layer", causal=True, d_model=D_MODEL, num_heads=HEADS)
    ours_params = dict(ours.named_parameters())
    assert sorted(ours_params) == sorted(name for name, _ in theirs.named_parameters())
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # off their initial values: a norm weight of 1 would hide a misuse
        for name, param in theirs.named_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
            ours_params[name].copy_(param)
    assert_same_in_float64(theirs, ours, generator, length=150)


def test_the_parameter_count_the_docstring_states() -> None:
    """2 d forget_dim + 2 d^2 + d at d_model 128, 4 heads (forget_dim = d): 65,664."""
    layer = build_layer("hgrn2_layer", causal=True, d_model=128, num_heads=4)
    assert sum(p.numel() for p in layer.parameters()) == 4 * 128 * 128 + 128 == 65_664
    assert layer.state_size(10) == 4 * 32 * 32
