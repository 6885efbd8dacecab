"""The recurrent variants (RetNet, GLA, Mamba-2, DeltaNet, Gated DeltaNet) against their papers'
formulas, the output-norm setting, the token plumbing of the block, and their MQAR state size.

The generic attention tests (exactness, padding, causality, step, gradients, autocast, compile)
pick these variants up from conf/attention/ as they do every other."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import VARIANTS, assert_close_float64, build, core, inputs
from helpers.training import compose_config
from omegaconf import OmegaConf
from torch.nn import functional as F

from linarena.attention import EluAttention, LinearAttention
from linarena.attention.maps.elu import EluFeatures
from linarena.attention.recurrent import (
    DeltaNetAttention,
    GLAAttention,
    RecurrentAttention,
    RetNetAttention,
)
from linarena.attention.variants import load_variant
from linarena.models import TransformerClassifier
from linarena.studies.runs import state_size

# Every variant whose core is a recurrence (a subclass of RecurrentAttention), read from the
# registry (conf/attention/): a new core is tested here without being named.
RECURRENT = [name for name in VARIANTS
             if isinstance(core(build(name, causal=True)), RecurrentAttention)]
# The cores that compute gates or beta from the token (RecurrentAttention.reads_token).
TOKEN_READING = [name for name in RECURRENT if core(build(name, causal=True)).reads_token]


def group_norm(x: torch.Tensor) -> torch.Tensor:
    """Mean 0, variance 1 over each head's features (GroupNorm, one group per head, eps 1e-6)."""
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_retnet_is_retention_with_gamma_per_head(causal):
    """RetNet's parallel form, written out: (Q K^T / sqrt(d) * D) V with D_ij = gamma_h^|i-j|
    (j <= i when causal), gamma_h = 1 - 2^(-5-h), then a GroupNorm per head."""
    q, k, v = inputs(batch=1, heads=3, length=21)
    out = RetNetAttention(16, causal=causal).double()(q, k, v)
    i = torch.arange(21, dtype=torch.float64)
    distance = (i[:, None] - i[None, :]).abs()
    gamma = 1 - 2.0 ** (-5 - torch.arange(3, dtype=torch.float64))
    decay = gamma[:, None, None] ** distance
    if causal:
        decay = decay.tril()
    expected = group_norm((q @ k.transpose(-1, -2) / 4.0 * decay) @ v)
    assert_close_float64(out, expected, 21 * 16)


def test_retnet_denominator_is_normalised_decayed_attention():
    """output_norm=denominator: the weights above divided by their sum (positive q, k)."""
    q, k, v = inputs(batch=1, heads=2, length=15)
    q, k = q.abs(), k.abs()
    out = RetNetAttention(16, causal=True, output_norm="denominator").double()(q, k, v)
    gamma = 1 - 2.0 ** (-5 - torch.arange(2, dtype=torch.float64))
    i = torch.arange(15, dtype=torch.float64)
    weights = (q @ k.transpose(-1, -2) / 4.0) * (gamma[:, None, None] ** (i[:, None] - i)).tril()
    assert_close_float64(out, weights @ v / (weights.sum(-1, keepdim=True) + 1e-6), 15 * 16)


def test_gla_gate_is_a_low_rank_logsigmoid_of_the_token_over_16():
    attn = GLAAttention(8, d_model=24, num_heads=3).double()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    q = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    r = attn.recurrence_inputs(q, q, q, x)
    assert attn.gate_down.weight.shape == (16, 24)  # W1: d_model x 16
    logits = x @ attn.gate_down.weight.double().t() @ attn.gate_up.weight.double().t()
    expected = F.logsigmoid(logits + attn.gate_up.bias.double()) / 16
    torch.testing.assert_close(r.log_gate, expected.view(2, 5, 3, 8).transpose(1, 2))
    assert r.beta is None and (r.log_gate < 0).all()


@pytest.mark.parametrize("name", ["mamba2", "gated_deltanet"])
def test_mamba2_gate_is_dt_times_a_per_head(name):
    """log gate = dt * A, dt = softplus(x w + dt_bias), A = -exp(A_log), one per head; Mamba-2
    also scales v by dt and puts no scale on C . B; Gated DeltaNet takes the same gate."""
    attn = core(build(name, causal=True)).double()
    x = torch.randn(2, 5, 48, dtype=torch.float64)
    q, k, v = inputs(batch=2, heads=3, length=5)
    r = attn.recurrence_inputs(q, k, v, x)
    gate = attn.gate
    dt = F.softplus(x @ gate.dt_proj.weight.double().t() + gate.dt_bias.double()).transpose(1, 2)
    torch.testing.assert_close(r.log_gate, -torch.exp(gate.A_log.double())[:, None] * dt)
    if name == "mamba2":
        torch.testing.assert_close(r.v, v * dt[..., None])
        assert r.scale == 1.0 and r.beta is None
    # Mamba-2's initialisation: dt in [1e-3, 0.1] for a zero input, A in [1, 16].
    assert ((F.softplus(gate.dt_bias) > 1e-3 - 1e-9) & (F.softplus(gate.dt_bias) < 0.1)).all()
    assert ((gate.A_log.exp() >= 1) & (gate.A_log.exp() <= 16)).all()


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet"])
def test_deltanet_normalises_silu_q_k_and_takes_beta_from_the_token(name):
    attn = core(build(name, causal=True)).double()
    x = torch.randn(2, 5, 48, dtype=torch.float64)
    q, k, v = inputs(batch=2, heads=3, length=5)
    r = attn.recurrence_inputs(q, k, v, x)
    torch.testing.assert_close(r.k, F.normalize(F.silu(k), dim=-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r.q, F.normalize(F.silu(q), dim=-1), rtol=1e-5, atol=1e-6)
    beta = torch.sigmoid(x @ attn.beta_proj.weight.double().t()).transpose(1, 2)
    torch.testing.assert_close(r.beta, beta)
    assert (r.log_gate is None) == (name == "deltanet")


def test_the_delta_rule_refuses_the_denominator():
    with pytest.raises(ValueError, match="denominator"):
        DeltaNetAttention(8, d_model=16, num_heads=2, output_norm="denominator")
    with pytest.raises(ValueError, match="output_norm must be one of"):
        RetNetAttention(8, output_norm="layer")


def test_linear_attention_takes_an_output_norm_after_its_denominator():
    q, k, v = inputs(batch=2, heads=2, length=13)
    plain = EluAttention(16, causal=True, chunk_size=4)(q, k, v)
    normed = LinearAttention(16, causal=True, feature_map=EluFeatures(), chunk_size=4,
                             output_norm="group").double()(q, k, v)
    assert_close_float64(normed, group_norm(plain), 13 * 16)
    with pytest.raises(ValueError, match="always divides"):
        LinearAttention(16, feature_map=EluFeatures(), output_norm="none")


def test_the_registry_finds_the_recurrences():
    assert {"retnet", "gla", "mamba2", "deltanet", "gated_deltanet"} <= set(RECURRENT)
    assert "elu" not in RECURRENT and "retnet" not in TOKEN_READING and "gla" in TOKEN_READING


@pytest.mark.parametrize("name", TOKEN_READING)
def test_a_token_reading_core_says_it_needs_x(name):
    attn = core(build(name, causal=False))
    q = torch.randn(2, 3, 5, 16)
    with pytest.raises(ValueError, match=r"call it with x=\(batch, length, d_model\)"):
        attn(q, q, q)


@pytest.mark.parametrize("name", TOKEN_READING)
def test_the_block_feeds_the_token_to_the_gates(name):
    """In a model, every parameter of the core gets a gradient: the block passes x= to it."""
    factory = load_variant(name, {"d_model": 32, "num_heads": 2})
    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=10, num_classes=3, head_kind="sequence",
                                  attention=factory, d_model=32, num_heads=2, num_layers=1,
                                  mlp_dim=32)
    tokens = torch.randint(1, 10, (2, 7))
    model(tokens, torch.ones(2, 7, dtype=torch.bool)).sum().backward()
    params = dict(model.blocks[0].attention.core.named_parameters())
    assert params, f"{name}: a token-reading core without parameters"
    silent = [key for key, p in params.items() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent, f"{name}: no gradient reaches {silent}"


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_state_accumulates_in_fp32(name):
    attn = build(name, causal=True, head_dim=8, heads=2)
    q = torch.randn(1, 2, 8, dtype=torch.bfloat16)
    out, state = attn.step(q, q, q)
    assert out.dtype == torch.bfloat16 and state.state.dtype == torch.float32
    assert state.state.shape == (1, 2, 8, 8) and state.position == 1


@pytest.mark.parametrize("name", RECURRENT)
def test_mqar_state_size_is_k_dim_by_v_dim_per_head_and_layer(name):
    """d_model 32 in 2 heads: head_dim 16, S 16 x 16 per head, 2 heads, the preset's 2 layers."""
    cfg = compose_config(["experiment=mqar_study_cpu", f"attention={name}",
                          "model.d_model=32", "model.num_heads=2"])
    config = OmegaConf.to_container(cfg, resolve=False)
    assert cfg.model.num_layers == 2
    assert state_size(config) == (16 * 16 * 2 * 2, "recurrent")


@pytest.mark.parametrize("name", RECURRENT)
def test_a_recurrent_state_of_another_layer_batch_or_dtype_is_refused(name):
    attn = build(name, causal=True, head_dim=8, heads=2)
    other = "retnet" if name != "retnet" else "gla"
    q = torch.randn(2, 2, 8)
    _, foreign = build(other, causal=True, head_dim=8, heads=2).step(q, q, q)
    with pytest.raises(ValueError, match=r"the state was made by .*this layer is"):
        attn.step(q, q, q, foreign)
    _, small = attn.step(q[:1], q[:1], q[:1])
    with pytest.raises(ValueError, match=r"batch 1 != 2"):
        attn.step(q, q, q, small)
    _, state = attn.step(q, q, q)
    with pytest.raises(ValueError, match=r"state is torch\.float32 but this call computes in "
                                         r"torch\.float64"):
        attn.double().step(q.double(), q.double(), q.double(), state)


@pytest.mark.parametrize("name", RECURRENT)
def test_values_of_another_width_than_q_are_refused(name):
    """The recurrences keep a head_dim x head_dim state per head (RetNet's wider values are its
    layer's expand_v, attention=retnet_layer): v of another width says so, in forward and
    step(), instead of a shape error inside the recurrence."""
    attn = core(build(name, causal=True, head_dim=8, heads=2))
    q, v, x = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 12), torch.randn(1, 5, 16)
    message = r"v must have last dim head_dim=8 \(the width of q and k\), got 12"
    with pytest.raises(ValueError, match=message):
        attn(q, q, v, x=x)
    with pytest.raises(ValueError, match=message):
        attn.step(q[:, :, 0], q[:, :, 0], v[:, :, 0], x=x[:, 0])


@pytest.mark.parametrize("name", TOKEN_READING)
def test_a_token_of_another_width_than_d_model_is_refused(name):
    attn = core(build(name, causal=True, head_dim=8, heads=2))  # d_model 16
    q, x = torch.randn(1, 2, 5, 8), torch.randn(1, 5, 15)
    message = r"call it with x=\(batch, length, d_model\) = \(1, 5, 16\), got \(1, 5, 15\)"
    with pytest.raises(ValueError, match=message):
        attn(q, q, q, x=x)
    with pytest.raises(ValueError, match=r"d_model\) = \(1, 1, 16\), got \(1, 1, 15\)"):
        attn.step(q[:, :, 0], q[:, :, 0], q[:, :, 0], x=x[:, 0])
