"""A batch with no padding skips the masking on CPU: same numbers, none of its torch.where calls
(at the studies' sizes each costs more than the attention's matrix products)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from helpers.attention import VARIANTS, build, inputs
from torch.utils._python_dispatch import TorchDispatchMode

from linarena.attention.validation import has_padding, zero_padding


class CountWhere(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.__name__.split(".")[0]] += 1
        return func(*args, **(kwargs or {}))


def test_has_padding_reads_a_cpu_mask_and_assumes_padding_elsewhere() -> None:
    real = torch.ones(2, 5, dtype=torch.bool)
    padded = real.clone()
    padded[1, 3:] = False
    assert not has_padding(None) and not has_padding(real) and has_padding(padded)
    # A mask on an accelerator is not read (that would wait for the device): it counts as padded.
    assert has_padding(real.to("meta"))


def test_zero_padding_of_an_unpadded_batch_is_the_input_itself() -> None:
    x = torch.randn(2, 5, 4)
    assert zero_padding(x, torch.ones(2, 5, dtype=torch.bool)) is x
    padded = torch.tensor([[True] * 5, [True, True, False, False, False]])
    assert zero_padding(x, padded)[1, 2:].eq(0).all()


@pytest.mark.parametrize("name", VARIANTS)
def test_an_unpadded_batch_runs_no_padding_where_and_gives_the_same_numbers(name: str) -> None:
    attn = build(name, causal=True)
    q, k, v = inputs(batch=2, heads=3, length=12)
    real = torch.ones(2, 12, dtype=torch.bool)
    with CountWhere() as unmasked:
        out = attn(q, k, v, mask=None)
    with CountWhere() as masked:
        out_masked = attn(q, k, v, mask=real)
    assert masked.calls["where"] == unmasked.calls["where"], (masked.calls, unmasked.calls)
    assert torch.equal(out, out_masked)
