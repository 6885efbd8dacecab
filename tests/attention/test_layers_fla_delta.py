"""The DeltaNet and Gated DeltaNet layers (linarena.attention.layers) against fla's own layers
(flash-linear-attention 0.6.0: fla.layers.DeltaNet, fla.layers.GatedDeltaNet): same sizes,
weights copied one to one, same float32 inputs on CPU, causal; outputs and the gradients of the
input and of every parameter agree.

fla's Triton kernels do not run on CPU, so the kernel functions the fla layer modules call are
replaced (pytest's monkeypatch) by references: fla's own where it has them
(fla.ops.delta_rule.naive.delta_rule_recurrence, fla.ops.gated_delta_rule.naive_recurrent_
gated_delta_rule with fla.ops.gated_delta_rule.gate.naive_gdn_gate, fla.modules.norm.layernorm.
rms_norm_ref, fla.modules.norm.layernorm_gated.rms_norm_ref), and for what fla has no torch
reference of (its causal_conv1d, the l2norm fused into the delta-rule kernels) the formula the
kernel computes, written out below. Also: `python train.py attention=deltanet_layer data=mqar`
trains in a tiny form.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.training import build_model, run_train
from torch.nn import functional as F

from linarena.attention.layers.deltanet import DeltaNetLayer
from linarena.attention.layers.gated_deltanet import GatedDeltaNetLayer

fla_layers = pytest.importorskip("fla.layers")
from fla.modules.norm import layernorm, layernorm_gated  # noqa: E402
from fla.ops.delta_rule.naive import delta_rule_recurrence  # noqa: E402
from fla.ops.gated_delta_rule import naive_recurrent_gated_delta_rule  # noqa: E402
from fla.ops.gated_delta_rule.gate import naive_gdn_gate  # noqa: E402

D_MODEL, HEADS, BATCH, LENGTH = 32, 2, 2, 37
# float32 throughout; both sides compute the same formulas in other orders (fla's reference
# token by token, ours by chunks in the WY form with a triangular solve), so they differ by
# rounding: a few units of 2^-24 per operation, grown through 37 delta-rule steps, the norms and
# two projections. Measured: at most 6e-6 of the tensor's largest entry (Gated DeltaNet's
# parameter gradients; outputs ~1e-6). Checked against 3e-5 of that largest entry; a formula
# difference shows far above (fla's norm eps 1e-5 replaced by 1e-6 moves outputs by 20%).
RELATIVE_TOLERANCE = 3e-5


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    atol = RELATIVE_TOLERANCE * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0,
                               msg=lambda message: f"{what}: {message}")


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """fla's l2norm kernel (fla/modules/norm/l2norm.py): x / sqrt(sum(x^2) + 1e-6)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def causal_conv1d(x, weight, bias=None, residual=None, initial_state=None,
                  output_final_state=False, activation=None, cu_seqlens=None, **_):
    """fla's causal_conv1d (Triton) from the start of a sequence: x (B, T, D), weight (D, W);
    y_t = act(bias + sum_w weight[:, w] x_{t - W + 1 + w}), as ShortConvolution (an nn.Conv1d
    with W - 1 padding, cut to the first T outputs) defines it."""
    assert residual is None and initial_state is None and cu_seqlens is None
    assert not output_final_state
    out = F.conv1d(F.pad(x.transpose(1, 2), (weight.shape[1] - 1, 0)), weight[:, None], bias,
                   groups=weight.shape[0]).transpose(1, 2)
    return (F.silu(out) if activation in ("silu", "swish") else out), None


def delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **_):
    """fla's chunk_delta_rule / fused_recurrent_delta_rule ((B, T, H, .) layout) on fla's
    token-by-token reference, which takes (B, H, T, .) and the default scale K^-0.5."""
    assert scale is None and cu_seqlens is None
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    o, state = delta_rule_recurrence(*(t.transpose(1, 2) for t in (q, k, v, beta)),
                                     initial_state, output_final_state)
    return o.transpose(1, 2), state


def gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                     use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                     allow_neg_eigval=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                     cu_seqlens=None, **_):
    """fla's chunk_gated_delta_rule / fused_recurrent_gated_delta_rule on fla's references:
    the gate g = -exp(A_log) softplus(g + dt_bias) (naive_gdn_gate), beta = sigmoid(beta), then
    naive_recurrent_gated_delta_rule ((B, T, H, .) layout, like the kernels)."""
    assert cu_seqlens is None and not allow_neg_eigval
    if use_gate_in_kernel:
        g = naive_gdn_gate(g, A_log, dt_bias)
    if use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid()
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    return naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale, initial_state,
                                            output_final_state)


def rms_norm(x, weight, bias, residual=None, eps=1e-5, prenorm=False, **_):
    """fla's RMSNorm kernel on its reference, rms_norm_ref."""
    return layernorm.rms_norm_ref(x, weight, bias, residual, eps, prenorm, upcast=True)


def rms_norm_gated(x, g, weight, bias, activation="swish", residual=None, prenorm=False,
                   eps=1e-6, **_):
    """fla's FusedRMSNormGated kernel (swish gate after the norm) on its reference."""
    assert activation in ("swish", "silu") and residual is None and not prenorm
    return layernorm_gated.rms_norm_ref(x, weight, bias, z=g, eps=eps, norm_before_gate=True)


@pytest.fixture
def fla_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Triton call of fla's DeltaNet and GatedDeltaNet layers replaced by its reference."""
    for target, reference in [
        ("fla.layers.delta_net.chunk_delta_rule", delta_rule),
        ("fla.layers.delta_net.fused_recurrent_delta_rule", delta_rule),
        ("fla.layers.gated_deltanet.chunk_gated_delta_rule", gated_delta_rule),
        ("fla.layers.gated_deltanet.fused_recurrent_gated_delta_rule", gated_delta_rule),
        ("fla.layers.gated_deltanet.causal_conv1d", causal_conv1d),  # its fused q, k, v conv
        ("fla.modules.causal_conv1d.ops.causal_conv1d", causal_conv1d),  # ShortConvolution's
        ("fla.modules.norm.layernorm.rms_norm", rms_norm),  # RMSNorm's
        ("fla.modules.norm.fused_norm_gate.rms_norm_gated", rms_norm_gated),  # FusedRMSNormGated's
    ]:
        monkeypatch.setattr(target, reference)


def copy_weights(ours: torch.nn.Module, theirs: torch.nn.Module, names: dict[str, str]) -> None:
    """theirs' parameters into ours, one to one: `names` maps each of ours to fla's name."""
    fla_params = dict(theirs.named_parameters())
    assert sorted(names) == sorted(name for name, _ in ours.named_parameters())
    assert sorted(names.values()) == sorted(fla_params)
    with torch.no_grad():
        for name, param in ours.named_parameters():
            param.copy_(fla_params[names[name]])


def conv_names() -> dict[str, str]:
    return {f"convs.{c}.conv.weight": f"{c}_conv1d.weight" for c in "qkv"}


def shared_names(use_gate: bool) -> dict[str, str]:
    names = {f"{p}_proj.weight": f"{p}_proj.weight" for p in "qkvbo"}
    names.update(conv_names())
    names["o_norm.weight"] = "o_norm.weight"
    if use_gate:
        names["g_proj.weight"] = "g_proj.weight"
    return names


def assert_same_layer(ours: torch.nn.Module, theirs: torch.nn.Module,
                      names: dict[str, str]) -> None:
    """Outputs and the gradients of x and of every parameter, for one random input and a random
    weighting of the outputs."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(BATCH, LENGTH, D_MODEL, generator=generator)
    weights = torch.randn(BATCH, LENGTH, D_MODEL, generator=generator)
    x_ours, x_fla = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours, out_fla = ours(x_ours), theirs(x_fla)[0]
    assert_close(out_ours, out_fla, "output")
    (out_ours * weights).sum().backward()
    (out_fla * weights).sum().backward()
    assert_close(x_ours.grad, x_fla.grad, "gradient of x")
    fla_params = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        assert_close(param.grad, fla_params[names[name]].grad, f"gradient of {name}")


@pytest.mark.parametrize("use_gate", [False, True])
def test_deltanet_layer_is_flas_deltanet(fla_on_cpu: None, use_gate: bool) -> None:
    torch.manual_seed(0)
    theirs = fla_layers.DeltaNet(hidden_size=D_MODEL, num_heads=HEADS, use_gate=use_gate)
    ours = DeltaNetLayer(D_MODEL, HEADS, causal=True, backend="torch", use_gate=use_gate)
    names = shared_names(use_gate)
    copy_weights(ours, theirs, names)
    assert_same_layer(ours, theirs, names)


@pytest.mark.parametrize("use_gate", [True, False])
def test_gated_deltanet_layer_is_flas_gated_deltanet(fla_on_cpu: None, use_gate: bool) -> None:
    torch.manual_seed(0)
    head_dim = D_MODEL // HEADS  # our default; fla's (256) is set to it
    theirs = fla_layers.GatedDeltaNet(hidden_size=D_MODEL, num_heads=HEADS, head_dim=head_dim,
                                      use_gate=use_gate)
    ours = GatedDeltaNetLayer(D_MODEL, HEADS, causal=True, backend="torch", use_gate=use_gate)
    assert (theirs.expand_v, theirs.conv_size) == (2, 4)  # fla's defaults are ours
    names = shared_names(use_gate)
    names.update({"gate.dt_proj.weight": "a_proj.weight", "gate.dt_bias": "dt_bias",
                  "gate.A_log": "A_log"})
    copy_weights(ours, theirs, names)
    assert_same_layer(ours, theirs, names)


def test_train_py_trains_the_deltanet_layer_on_mqar(tmp_path: Path) -> None:
    """`python train.py attention=deltanet_layer data=mqar`, shrunk by debug=smoke: a few
    training steps run and write their summary; the composed model uses the layer as built
    (no model.short_conv: data=mqar leaves it at 0)."""
    overrides = ["attention=deltanet_layer", "data=mqar", "debug=smoke"]
    cfg, _, model = build_model(overrides)
    assert cfg.model.short_conv == 0
    assert all(isinstance(block.attention, DeltaNetLayer) for block in model.blocks)
    done = run_train([*overrides, "logger=csv", "trainer.enable_progress_bar=false",
                      "trainer.max_steps=3", f"hydra.run.dir={tmp_path / 'run'}"],
                     tmp_path, tmp_path / "data")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file()
