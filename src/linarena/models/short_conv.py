"""Short causal depthwise convolution: the local token mixing Zoology and Based put before
attention.

MQAR needs each value to carry the key in front of it (a one-token shift). Softmax attention can
learn that as a previous-token head; a linear attention layer cannot focus that sharply, so the
Zoology and Based MQAR studies give every model a short causal convolution (kernel 3).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class ShortConv(nn.Module):
    """x + conv(x): a depthwise causal Conv1d over the sequence, one filter per channel.

    Position i sees positions i - kernel_size + 1 .. i only (left zero padding), so no future
    token changes a past output. The residual keeps the token itself when the taps start random.

    Args:
        d_model: channels (one filter of `kernel_size` taps each, plus a bias).
        kernel_size: taps, >= 1.
    """

    def __init__(self, d_model: int, kernel_size: int) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"model.short_conv must be >= 1 (taps) or 0 (off), got {kernel_size}.")
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (batch, length, d_model); mask: bool (batch, length), True for real tokens,
        right-padded -> (batch, length, d_model). Padded positions are zeroed before mixing."""
        # where, not a product: 0 * NaN is NaN, and would reach the conv's weight gradient.
        x = torch.where(mask.unsqueeze(-1), x, 0.0)
        padded = F.pad(x.transpose(1, 2), (self.kernel_size - 1, 0))  # (batch, d_model, length')
        return x + self.conv(padded).transpose(1, 2)
