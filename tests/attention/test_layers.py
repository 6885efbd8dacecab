"""Generic tests of every whole layer of conf/attention/ (linarena.attention.layers): a new layer
file is picked up with no test edited. What a user relies on: causality, padding that reaches no
real output or gradient, step() and continued states equal to one whole forward pass, a state
refused by another layer, and the state size the studies count. Each layer's formulas are
checked against fla's own layer in tests/attention/test_layers_fla_{gated,delta,based}.py.

Each generic check takes `make`, a function building the layer (make(causal, d_model=...,
rotary=...)), and is registered in GENERIC_CHECKS: the layers of conf/attention/ run every one
(test_every_layer_passes_the_generic_checks), and a layer built from a class only
(layer_from_class, e.g. tests/attention/test_layer_seam.py) can run them all the same way."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch
from helpers.attention import LAYER_HEADS, LAYER_VARIANTS, LAYER_WIDTH, build_layer

from linarena.attention.layers.based import BasedLayer
from linarena.models.positions import RotaryPositions

# float64 sums of at most a few hundred terms of size ~1: rounding ~1e-13; 1e-10 leaves room
# for any summation order (threads, BLAS) and catches any formula difference.
ATOL = 1e-10

Make = Callable[..., torch.nn.Module]  # make(causal, d_model=..., rotary=...) -> a float32 layer
GENERIC_CHECKS: list = []  # pytest.param(check, causal) for every generic check and mode


def generic(*modes: bool) -> Callable:
    """Registers a check(make, causal) in GENERIC_CHECKS for each causal mode."""
    def register(check: Callable) -> Callable:
        GENERIC_CHECKS.extend(pytest.param(check, causal, id=f"{check.__name__}-{causal}")
                              for causal in modes)
        return check
    return register


def layer_from_class(cls: type, **kwargs) -> Make:
    """`make` for a layer class: cls(d_model, LAYER_HEADS, causal, rotary=rotary, **kwargs),
    built after the global seed is set, as build_layer does."""
    def make(causal: bool, d_model: int = LAYER_WIDTH, rotary=None) -> torch.nn.Module:
        torch.manual_seed(0)
        return cls(d_model, LAYER_HEADS, causal, rotary=rotary, **kwargs)
    return make


def tokens(batch: int = 2, length: int = 21, seed: int = 1, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, LAYER_WIDTH, generator=generator, dtype=dtype)


def layer64(make: Make, causal: bool, **kwargs) -> torch.nn.Module:
    return make(causal, **kwargs).double()


@generic(True)
def a_causal_layer_never_reads_the_future(make: Make, causal: bool) -> None:
    layer = layer64(make, causal)
    x = tokens()
    changed = x.clone()
    changed[:, 12:] = torch.randn_like(changed[:, 12:])
    out, out_changed = layer(x), layer(changed)
    assert out.shape == x.shape
    torch.testing.assert_close(out[:, :12], out_changed[:, :12], atol=ATOL, rtol=0)
    assert not torch.allclose(out[:, 12:], out_changed[:, 12:])


@generic(False, True)
def padding_reaches_no_real_output_and_no_gradient(make: Make, causal: bool) -> None:
    """Right padding holding NaN: real outputs are those of the unpadded rows, and every
    parameter gradient stays finite."""
    layer = layer64(make, causal)
    x = tokens()
    lengths = [21, 13]
    mask = torch.arange(21) < torch.tensor(lengths)[:, None]
    padded = torch.where(mask[..., None], x, float("nan")).requires_grad_()
    out = layer(padded, mask)
    for row, length in enumerate(lengths):
        alone = layer(x[row:row + 1, :length])
        torch.testing.assert_close(out[row:row + 1, :length], alone, atol=ATOL, rtol=0)
    out[mask].sum().backward()
    for pname, param in layer.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), pname
    assert torch.isfinite(padded.grad[mask]).all() and (padded.grad[~mask] == 0).all()


@generic(True)
def step_and_continued_states_give_the_whole_sequence(make: Make, causal: bool) -> None:
    layer = layer64(make, causal)
    x = tokens()
    whole = layer(x)
    first, state = layer(x[:, :8], return_state=True)
    rest, _ = layer(x[:, 8:], initial_state=state, return_state=True)
    torch.testing.assert_close(torch.cat([first, rest], 1), whole, atol=ATOL, rtol=0)
    state, steps = None, []
    for t in range(x.shape[1]):
        out, state = layer.step(x[:, t], state)
        steps.append(out)
    torch.testing.assert_close(torch.stack(steps, 1), whole, atol=ATOL, rtol=0)
    assert state.position == x.shape[1]


@generic(True)
def the_state_of_a_padded_row_is_that_of_its_real_tokens(make: Make, causal: bool) -> None:
    layer = layer64(make, causal)
    x = tokens()
    mask = torch.arange(21) < torch.tensor([21, 9])[:, None]
    _, padded_state = layer(x, mask, return_state=True)
    _, alone = layer(x[1:, :9], return_state=True)
    for key, tensor in alone.tensors.items():
        torch.testing.assert_close(padded_state.tensors[key][1:], tensor, atol=ATOL, rtol=0)


@generic(True)
def the_state_size_counts_what_the_state_holds(make: Make, causal: bool) -> None:
    """state_size(length), which the studies plot, is the numbers the state keeps per
    sequence, after a short and a long sequence."""
    layer = layer64(make, causal)
    for length in (5, 21):
        _, state = layer(tokens(length=length), return_state=True)
        held = sum(tensor[0].numel() for tensor in state.tensors.values())
        assert layer.state_size(length) == held, length


@generic(True)
def a_state_is_continued_only_by_the_layer_kind_that_made_it(make: Make, causal: bool) -> None:
    layer = layer64(make, causal)
    _, state = layer(tokens(), return_state=True)
    other = layer64(make, causal, d_model=2 * LAYER_WIDTH)
    with pytest.raises(ValueError, match="made by"):
        other(torch.zeros(2, 3, 2 * LAYER_WIDTH, dtype=torch.float64), initial_state=state)
    with pytest.raises(ValueError, match="causal"):
        layer64(make, False)(tokens(), return_state=True)


@generic(False, True)
def float32_follows_float64_and_rotary_positions_are_taken(make: Make, causal: bool) -> None:
    layer = make(causal)
    x = tokens(dtype=torch.float32)
    expected = layer.double()(x.double())
    torch.testing.assert_close(layer.float()(x).double(), expected, atol=1e-4, rtol=1e-4)
    rotary = RotaryPositions(LAYER_WIDTH, 64)
    rotated = make(causal, rotary=rotary)(x)
    assert torch.isfinite(rotated).all() and not torch.allclose(rotated, layer(x))


@pytest.mark.parametrize(("check", "causal"), GENERIC_CHECKS)
@pytest.mark.parametrize("name", LAYER_VARIANTS)
def test_every_layer_passes_the_generic_checks(name: str, check: Callable, causal: bool) -> None:
    check(partial(build_layer, name), causal)


@pytest.mark.parametrize("causal", [False, True])
def test_a_based_window_far_longer_than_the_sequence_is_the_window_of_its_length(
    causal: bool,
) -> None:
    """Based's window=2**40 on 21 tokens allocates nothing of the window's size and gives the
    outputs of window=21 (the same weights)."""
    fitted = BasedLayer(LAYER_WIDTH, LAYER_HEADS, causal, window=21).double()
    huge = BasedLayer(LAYER_WIDTH, LAYER_HEADS, causal, window=2**40).double()
    huge.load_state_dict(fitted.state_dict())
    x = tokens()
    mask = torch.arange(21) < torch.tensor([21, 9])[:, None]
    assert torch.equal(huge(x, mask), fitted(x, mask))
