"""model.short_conv: a causal depthwise convolution before each block's attention, off by
default."""

from __future__ import annotations

import pytest
import torch
from helpers.training import compose_config, config_names

from linarena.attention.variants import load_variant
from linarena.models import TransformerClassifier
from linarena.models.short_conv import ShortConv


def test_a_future_token_never_changes_a_past_output() -> None:
    torch.manual_seed(0)
    conv = ShortConv(d_model=6, kernel_size=3)
    mask = torch.ones(2, 10, dtype=torch.bool)
    x = torch.randn(2, 10, 6)
    changed = x.clone()
    changed[:, 6:] = torch.randn(2, 4, 6)
    with torch.no_grad():
        before, after = conv(x, mask), conv(changed, mask)
    torch.testing.assert_close(after[:, :6], before[:, :6])
    assert not torch.allclose(after[:, 6:], before[:, 6:])


def test_each_output_mixes_exactly_the_last_kernel_size_tokens() -> None:
    conv = ShortConv(d_model=1, kernel_size=3)
    with torch.no_grad():
        conv.conv.weight.copy_(torch.tensor([[[100.0, 10.0, 1.0]]]))  # taps t-2, t-1, t
        conv.conv.bias.zero_()
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 4, 1)
    out = conv(x, torch.ones(1, 4, dtype=torch.bool)).flatten()
    # x + (100 x[t-2] + 10 x[t-1] + x[t]), zeros before the start
    torch.testing.assert_close(out, torch.tensor([2.0, 14.0, 126.0, 238.0]))


def test_padded_positions_do_not_leak_into_real_ones() -> None:
    torch.manual_seed(0)
    conv = ShortConv(d_model=4, kernel_size=3)
    x = torch.randn(1, 5, 4)
    mask = torch.tensor([[False, True, True, True, True]])  # a masked first position
    other = x.clone()
    other[:, 0] = 1e3
    torch.testing.assert_close(conv(x, mask)[:, 1:], conv(other, mask)[:, 1:])


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_non_finite_padding_changes_no_gradient(poison: float) -> None:
    """Right padding holding NaN or Inf (0 * NaN is NaN: masking by a product would spread it
    to the conv's weight gradient)."""
    torch.manual_seed(0)
    conv = ShortConv(d_model=4, kernel_size=3).double()
    mask = torch.tensor([[True, True, True, False, False]])
    grads = []
    for fill in (0.0, poison):
        x = torch.randn(1, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        x[:, 3:] = fill
        x.requires_grad_(True)
        conv.zero_grad()
        conv(x, mask)[:, :3].sum().backward()
        grads.append((x.grad[:, :3].clone(), conv.conv.weight.grad.clone()))
    for clean, poisoned in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(poisoned, clean)


@pytest.mark.parametrize("attention", ["softmax", "elu"])
def test_the_model_with_a_short_conv_stays_causal(attention: str) -> None:
    torch.manual_seed(0)
    model = TransformerClassifier(
        vocab_size=12, num_classes=5, head_kind="token", attention=load_variant(attention),
        d_model=16, num_heads=2, mlp_dim=32, dropout=0.0, max_length=16, causal=True,
        short_conv=3,
    ).eval()
    tokens = torch.randint(1, 12, (2, 12))
    changed = tokens.clone()
    changed[:, 8:] = (tokens[:, 8:] % 11) + 1
    mask = torch.ones(2, 12, dtype=torch.bool)
    with torch.no_grad():
        torch.testing.assert_close(model(changed, mask)[:, :8], model(tokens, mask)[:, :8])
    assert all(isinstance(block.short_conv, ShortConv) for block in model.blocks)


def test_bad_kernel_size_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"model\.short_conv"):
        ShortConv(d_model=4, kernel_size=-1)


@pytest.mark.parametrize(
    "experiment", [name for name in config_names("experiment")
                   if not name.startswith(("mqar_study", "mqar_mixture"))]
)
def test_off_in_every_preset_but_the_study_and_the_mixture(experiment: str) -> None:
    assert compose_config([f"experiment={experiment}"]).model.short_conv == 0


def test_off_by_default() -> None:
    assert compose_config([]).model.short_conv == 0
    model = TransformerClassifier(vocab_size=12, num_classes=5, head_kind="sequence",
                                  attention=load_variant("softmax"), d_model=16, num_heads=2)
    assert all(block.short_conv is None for block in model.blocks)
