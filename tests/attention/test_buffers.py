"""Scratch hands out buffers of the dtype and device it is asked for, whatever it held before."""

from __future__ import annotations

import torch

from linarena.attention.buffers import Scratch


def test_a_buffer_has_the_dtype_asked_for_after_one_of_another_dtype() -> None:
    # One ChunkFeatures may serve a float32 call and then a float64 one (a float64 replay of a
    # kernel's saved inputs): the second must not get the first's float32 memory.
    scratch = Scratch()
    small = scratch("phi", torch.zeros(1, dtype=torch.float32), 2, 3)
    wide = scratch("phi", torch.zeros(1, dtype=torch.float64), 2, 3)
    assert small.dtype == torch.float32
    assert wide.dtype == torch.float64 and wide.shape == (2, 3)
    wide.fill_(1e300)  # a value float32 cannot hold
    assert torch.isfinite(wide).all()
    again = scratch("phi", torch.zeros(1, dtype=torch.float32), 4)
    assert again.dtype == torch.float32 and again.shape == (4,)


def test_a_buffer_is_reused_for_the_same_name_and_dtype() -> None:
    scratch = Scratch()
    first = scratch("phi", torch.zeros(1), 8)
    second = scratch("phi", torch.zeros(1), 2, 4)
    assert second.data_ptr() == first.data_ptr()
    assert scratch("keys", torch.zeros(1), 8).data_ptr() != first.data_ptr()
