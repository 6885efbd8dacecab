"""The GLA, RetNet and Mamba-2 layers (attention=gla_layer, retnet_layer, mamba2_layer) against
flash-linear-attention 0.6.0's own layers: same sizes, the same weights copied one to one, the
same float32 inputs on CPU; outputs and gradients (input and every parameter) agree. Also: the
parameter counts the docstrings state, and one tiny train.py run of each layer.

fla's Triton kernels do not run on CPU, so the kernels and fused norms the fla layers call are
replaced (pytest's monkeypatch) by fla's own torch references: naive_recurrent_gla and
naive_retention for the recurrences, rms_norm_ref (fla.modules.norm.layernorm_gated) for the
gated RMSNorms, rotary_embedding_ref for RetNet's rotation. fla's Mamba2 runs its own torch path
on CPU (torch_forward), so only its norm and its activation (fla's Triton swish, replaced by
torch's silu, the same x * sigmoid(x)) are replaced. fla's layers are causal only.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest
import torch
from helpers.attention import build_layer
from helpers.fla_reference import assert_same_in_float64, gla_in_dtype
from helpers.training import run_train

fla_layers = pytest.importorskip("fla.layers")

D_MODEL, HEADS = 32, 2

# float32 (unit roundoff 6e-8) on both sides, summed in different orders (fla's naive loops
# token by token, ours by chunks; fla's Mamba2 by its own chunks): every output and gradient
# element is a sum of at most a few thousand products (d_model x length x heads), so rounding
# reaches ~1e-6 relative (measured: 5e-7); 1e-4 relative and 1e-5 absolute leave room for any
# summation order, while a wrong scale, decay, gate, rotation, skip or weight moves results by
# 1e-2 or more. (A norm eps of 1e-6 for 1e-5 changes them by ~1e-6 only: that is read, not
# tested.)
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture
def fla_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fla layers' Triton calls replaced by fla's torch references of the same formulas."""
    import fla.layers.gla as fla_gla
    import fla.layers.multiscale_retention as fla_retention
    import fla.modules.norm.fused_norm_gate as fused_norm_gate
    import fla.modules.norm.layernorm_gated as layernorm_gated
    import fla.modules.rotary.ops as rotary_ops
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.retention.naive import naive_retention

    def gla(q, k, v, gk=None, g=None, initial_state=None, output_final_state=False, **_):
        assert initial_state is None and not output_final_state
        return naive_recurrent_gla(q, k, v, g if gk is None else gk)

    def retention(q, k, v, initial_state=None, output_final_state=False, **_):
        assert initial_state is None and not output_final_state
        # naive_retention takes and gives (batch, heads, n, dim); the layer's layout is
        # (batch, n, heads, dim).
        out = naive_retention(*(t.transpose(1, 2) for t in (q, k, v)))
        return out.transpose(1, 2), None

    def norm_then_swish_gate(x, g, weight, bias, activation="swish", residual=None,
                             prenorm=False, residual_in_fp32=False, eps=1e-6):
        assert activation == "swish" and residual is None and not prenorm
        return layernorm_gated.rms_norm_ref(x, weight, bias, z=g, eps=eps, norm_before_gate=True)

    def gated_norm(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
        return layernorm_gated.rms_norm_ref(x, weight, bias, z=z, eps=eps,
                                            group_size=group_size,
                                            norm_before_gate=norm_before_gate)

    def rotary(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
               cu_seqlens=None, chunk_indices=None):
        assert isinstance(seqlen_offsets, int) and cu_seqlens is None
        positions = slice(seqlen_offsets, seqlen_offsets + x.shape[1])
        return rotary_ops.rotary_embedding_ref(x, cos[positions], sin[positions], interleaved)

    monkeypatch.setattr(fla_gla, "fused_recurrent_gla", gla)
    monkeypatch.setattr(fla_gla, "chunk_gla", gla)
    monkeypatch.setattr(fla_retention, "chunk_retention", retention)
    monkeypatch.setattr(fla_retention, "fused_recurrent_retention", retention)
    monkeypatch.setattr(fused_norm_gate, "rms_norm_gated", norm_then_swish_gate)
    monkeypatch.setattr(layernorm_gated, "rmsnorm_fn", gated_norm)
    monkeypatch.setattr(rotary_ops, "rotary_embedding", rotary)


def fla_layer(name: str) -> torch.nn.Module:
    """fla's layer with the sizes our YAML gives at d_model 32, 2 heads (fla's defaults
    otherwise; Mamba2's head_dim and state_size are ours, derived from the width)."""
    if name == "gla_layer":
        return fla_layers.GatedLinearAttention(hidden_size=D_MODEL, num_heads=HEADS)
    if name == "retnet_layer":
        return fla_layers.MultiScaleRetention(hidden_size=D_MODEL, num_heads=HEADS)
    head_dim = 2 * D_MODEL // HEADS
    layer = fla_layers.Mamba2(num_heads=HEADS, head_dim=head_dim, hidden_size=D_MODEL,
                              state_size=2 * head_dim, expand=2)
    layer.act = torch.nn.functional.silu  # fla's Triton swish: the same x * sigmoid(x)
    return layer


# fla's parameter name -> ours; names absent here are the same on both sides.
RENAMED = {
    "gla_layer": {"gk_proj.0.weight": "gate_down.weight", "gk_proj.1.weight": "gate_up.weight",
                  "gk_proj.1.bias": "gate_up.bias", "g_norm_swish_gate.weight": "g_norm.weight"},
    "retnet_layer": {"g_norm_swish_gate.weight": "g_norm.weight"},
    "mamba2_layer": {"conv1d.weight": "conv.conv.weight", "conv1d.bias": "conv.conv.bias",
                     "norm.weight": "norm_weight"},
}


def copy_weights(theirs: torch.nn.Module, ours: torch.nn.Module, name: str) -> dict[str, str]:
    """fla's weights, moved off their initial values (norm weights of 1, D of 1, zero biases
    would hide a weight used in the wrong place), copied into ours; returns the name map."""
    generator = torch.Generator().manual_seed(3)
    mapping = {key: RENAMED[name].get(key, key) for key, _ in theirs.named_parameters()}
    ours_params = dict(ours.named_parameters())
    assert sorted(mapping.values()) == sorted(ours_params), "parameters differ"
    with torch.no_grad():
        for key, param in theirs.named_parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
            assert ours_params[mapping[key]].shape == param.shape, key
            ours_params[mapping[key]].copy_(param)
    return mapping


@pytest.mark.parametrize("name", ["gla_layer", "retnet_layer", "mamba2_layer"])
def test_the_layer_computes_what_fla_s_layer_computes(name: str, fla_on_cpu: None) -> None:
    torch.manual_seed(0)
    theirs = fla_layer(name)
    ours = build_layer(name, causal=True, d_model=D_MODEL, num_heads=HEADS)
    mapping = copy_weights(theirs, ours, name)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 37, D_MODEL, generator=generator)
    cotangent = torch.randn(x.shape, generator=generator)
    x_theirs, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()

    out_theirs = theirs(x_theirs)[0]
    out_ours = ours(x_ours)
    torch.testing.assert_close(out_ours, out_theirs, rtol=RTOL, atol=ATOL)
    assert out_ours.abs().max() > 0.1  # a real comparison, not of two near-zero outputs

    (out_theirs * cotangent).sum().backward()
    (out_ours * cotangent).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=RTOL, atol=ATOL)
    ours_params = dict(ours.named_parameters())
    for key, param in theirs.named_parameters():
        torch.testing.assert_close(ours_params[mapping[key]].grad, param.grad, rtol=RTOL,
                                   atol=ATOL, msg=lambda m, key=key: f"{key}: {m}")


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_parameter_counts_the_docstrings_state() -> None:
    """At d_model 128, 4 heads, by formula (d = d_model): GLA 4 d^2 + 16 (d + d/2) + d/2 +
    d/4; RetNet 8 d^2 + 2 d/4; Mamba-2 (inner 2d, state 128, conv 4) d (4d + 256 + 4) +
    (2d + 256) 5 + 3 x 4 + 2d + 2d^2."""
    d = 128
    expected = {"gla_layer": 4 * d * d + 16 * (d + d // 2) + d // 2 + d // 4,
                "retnet_layer": 8 * d * d + 2 * d // 4,
                "mamba2_layer": d * (4 * d + 256 + 4) + (2 * d + 256) * 5 + 12 + 2 * d
                + 2 * d * d}
    assert expected == {"gla_layer": 68_704, "retnet_layer": 131_136, "mamba2_layer": 134_412}
    for name, number in expected.items():
        assert count(build_layer(name, causal=True, d_model=d, num_heads=4)) == number, name


def test_train_py_runs_each_layer_on_mqar(tmp_path: Path) -> None:
    """python train.py attention=<layer> data=mqar, tiny (debug=smoke), the three in one
    Hydra multirun (one process start)."""
    layers = ["gla_layer", "retnet_layer", "mamba2_layer"]
    result = run_train(["-m", "debug=smoke", "data=mqar", "logger=csv",
                        "trainer.enable_progress_bar=false", f"attention={','.join(layers)}"],
                       tmp_path, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [json.loads(Path(path).read_text()) for path in
                 sorted(glob.glob(str(tmp_path / "outputs" / "multiruns" / "*" / "*" /
                                      "summary.json")))]
    assert sorted(s["attention"] for s in summaries) == sorted(layers)
    for summary in summaries:
        assert summary["global_step"] == 4 and summary["metrics"]["model/params"] > 0
        assert torch.isfinite(torch.tensor(summary["metrics"]["test/loss"]))


@pytest.fixture
def fla_on_cpu_float64(fla_on_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """As fla_on_cpu, with the references that would round to float32 (fla's naive GLA and
    rms_norm_ref upcast to float32 and cast back) written out in the input's dtype: the same
    formulas, S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t (fla's
    naive_recurrent_gla), and RMSNorm(x) * weight * swish(gate) (rms_norm_ref)."""
    import fla.layers.gla as fla_gla
    import fla.modules.norm.fused_norm_gate as fused_norm_gate

    def rms(x, weight, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def norm_then_swish_gate(x, g, weight, bias, activation="swish", residual=None,
                             prenorm=False, residual_in_fp32=False, eps=1e-6):
        assert bias is None and residual is None and not prenorm
        return rms(x, weight, eps) * torch.nn.functional.silu(g)

    monkeypatch.setattr(fla_gla, "fused_recurrent_gla", gla_in_dtype)
    monkeypatch.setattr(fla_gla, "chunk_gla", gla_in_dtype)
    monkeypatch.setattr(fused_norm_gate, "rms_norm_gated", norm_then_swish_gate)


def test_the_gla_layer_is_fla_s_in_float64_across_chunks(fla_on_cpu_float64: None) -> None:
    """GLA (per-key gates, the norm-gate), float64 on both sides, 150 tokens (ours: chunks of
    64, so the state crosses two chunk boundaries), every weight moved off its initial value
    (norm weights included, so a weight left out or put in the wrong place shows): outputs and
    all gradients agree to float64 rounding, where float32 would only reach 1e-6. (fla's Mamba2
    computes A = -exp(A_log) in float32 whatever the input, so it is compared in float32 only.)
    """
    name = "gla_layer"
    torch.manual_seed(0)
    theirs = fla_layer(name)
    ours = build_layer(name, causal=True, d_model=D_MODEL, num_heads=HEADS)
    mapping = copy_weights(theirs, ours, name)
    assert_same_in_float64(theirs, ours, torch.Generator().manual_seed(1), 150, mapping)
