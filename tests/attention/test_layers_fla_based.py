"""attention=based_layer (linarena.attention.layers.based.BasedLayer): its linear attention
against fla's own BasedLinearAttention (flash-linear-attention 0.6.0), weights copied both ways,
on CPU with fla's Triton kernel replaced by fla's naive reference; the layer with a window
shorter than the sequence (the generic layer tests, tests/attention/test_layers.py, use
sequences inside the default window); and a smoke run of train.py with it on MQAR."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.attention import build_layer
from helpers.training import compose_config
from hydra.core.hydra_config import HydraConfig

from linarena.attention.layers.based import BasedLayer
from linarena.training import train

WIDTH, HEADS = 64, 4  # values 16 wide per head, as the q, k features


@pytest.fixture
def fla_based(monkeypatch: pytest.MonkeyPatch) -> type:
    """fla.layers.BasedLinearAttention, its causal path on fla's naive_parallel_based (the
    pure-PyTorch reference of its Triton parallel_based, same scale and 1e-6 normaliser eps)."""
    layers = pytest.importorskip("fla.layers")
    from fla.layers import based as fla_layer
    from fla.ops.based.naive import naive_parallel_based

    def parallel_based(q, k, v, scale=None, use_norm=True):
        # The kernel takes (batch, n, heads, dim), the naive reference (batch, heads, n, dim).
        out = naive_parallel_based(*(t.transpose(1, 2) for t in (q, k, v)), scale, use_norm)
        return out.transpose(1, 2)

    monkeypatch.setattr(fla_layer, "parallel_based", parallel_based)
    return layers.BasedLinearAttention


def outputs_and_gradients(module: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The output, and the gradients of x and of q, k, v, o_proj of a fixed random weighting."""
    x = x.detach().requires_grad_(True)
    out = module(x)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    # backward(), not autograd.grad: fla's Taylor map runs under a reentrant checkpoint.
    (out * weights).sum().backward()
    params = [getattr(module, name).weight for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    return [out.detach(), x.grad, *(p.grad for p in params)]


# fla's bidirectional path checkpoints its Taylor map without saying use_reentrant.
@pytest.mark.filterwarnings("ignore:torch.utils.checkpoint")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("direction", ["fla_into_ours", "ours_into_fla"])
def test_the_linear_attention_is_flas_based_linear_attention(fla_based, causal, direction):
    """Same float32 inputs and weights: outputs and gradients (of x and the four projections)
    equal to float32 rounding. Both compute the same sums (length 50, 273 features) in another
    order, ours in chunks with a carried state, fla's as one masked quadratic matrix (causal:
    naive_parallel_based; bidirectional: its forward_reference, eps 1e-12): measured at most
    5e-7 of each tensor's largest entry apart, so 1e-5 of it leaves 20x room; a formula
    difference (scale, features, eps, head layout) moves them by 1e-2 or more."""
    ours = build_layer("based_layer", causal, d_model=WIDTH, num_heads=HEADS).linear
    torch.manual_seed(1)
    fla = fla_based(hidden_size=WIDTH, feature_dim=16, num_heads=HEADS,
                    num_key_value_heads=HEADS, causal=causal)
    if direction == "fla_into_ours":
        ours.load_state_dict(fla.state_dict())
    else:
        fla.load_state_dict(ours.state_dict())
    x = torch.randn(2, 50, WIDTH, generator=torch.Generator().manual_seed(2))
    for got, expected in zip(outputs_and_gradients(ours, x), outputs_and_gradients(fla, x),
                             strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5 * expected.abs().max())


def test_a_window_shorter_than_the_sequence_keeps_step_padding_and_state_exact() -> None:
    """Window 4 over 21 tokens: step() and a continued call give the whole forward pass, and a
    padded row's outputs and state are those of its real tokens alone (float64)."""
    torch.manual_seed(0)
    layer = BasedLayer(32, 2, causal=True, window=4).double()
    x = torch.randn(2, 21, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    whole = layer(x)
    first, state = layer(x[:, :9], return_state=True)
    torch.testing.assert_close(torch.cat([first, layer(x[:, 9:], initial_state=state)], 1),
                               whole, atol=1e-10, rtol=0)
    state, steps = None, []
    for t in range(21):
        out, state = layer.step(x[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), whole, atol=1e-10, rtol=0)
    assert state.tensors["window_k"].shape == (2, 2, 3, 16)
    mask = torch.arange(21) < torch.tensor([21, 6])[:, None]
    out, padded = layer(x, mask, return_state=True)
    alone_out, alone = layer(x[1:, :6], return_state=True)
    torch.testing.assert_close(out[1:, :6], alone_out, atol=1e-10, rtol=0)
    for key, tensor in alone.tensors.items():
        torch.testing.assert_close(padded.tensors[key][1:], tensor, atol=1e-10, rtol=0)
    assert layer.state_size(21) == sum(t[0].numel() for t in padded.tensors.values())


def test_fla_is_refused_and_a_second_short_conv_too() -> None:
    with pytest.raises(ValueError, match="no kernel for Based"):
        BasedLayer(32, 2, causal=True, backend="fla")
    assert BasedLayer.own_short_conv


def test_train_py_runs_the_based_layer_on_mqar(tmp_path: Path) -> None:
    """`python train.py attention=based_layer data=mqar debug=smoke`, in this process (MQAR is
    generated: 64 tokens, causal)."""
    output_dir = tmp_path / "run"
    cfg = compose_config(["attention=based_layer", "data=mqar", "debug=smoke", "logger=csv",
                          f"paths.data_dir={tmp_path / 'data'}",
                          "trainer.enable_progress_bar=false"], output_dir=output_dir)
    try:
        train(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert '"attention_backend": "torch"' in (output_dir / "summary.json").read_text()
