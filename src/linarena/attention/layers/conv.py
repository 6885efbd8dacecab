"""The short causal convolution the published layers put on their projections (DeltaNet, Gated
DeltaNet, Mamba-2, optionally GLA): depthwise over the sequence, then an activation, no residual,
as fla's ShortConvolution; it keeps its last kernel_size - 1 inputs to continue a sequence."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class CausalConv(nn.Module):
    """act(depthwise_conv(x)): position i sees positions i - kernel_size + 1 .. i.

    Args:
        channels: features of x (one filter of kernel_size taps each).
        kernel_size: taps (4 in the published layers).
        bias: a bias per channel (Mamba-2: yes; DeltaNet, Gated DeltaNet: no).
        activation: "silu" or None.
    """

    def __init__(self, channels: int, kernel_size: int = 4, bias: bool = False,
                 activation: str | None = "silu") -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"CausalConv: kernel_size must be >= 1, got {kernel_size}.")
        if activation not in ("silu", None):
            raise ValueError(f"CausalConv: activation must be 'silu' or None, got {activation!r}.")
        self.kernel_size = kernel_size
        self.activation = activation
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=bias)

    def forward(self, x: Tensor, cache: Tensor | None = None, lengths: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:
        """x: (batch, n, channels), padded tokens already zeroed; cache: (batch, channels,
        kernel_size - 1), the inputs before x (None: zeros, the start of a sequence); lengths:
        (batch,) real tokens of each right-padded row (None: all n).
        Returns (output (batch, n, channels), the cache after each row's real tokens)."""
        x = x.transpose(1, 2)
        if cache is None:
            cache = x.new_zeros(x.shape[0], x.shape[1], self.kernel_size - 1)
        full = torch.cat([cache.to(x.dtype), x], dim=-1)
        weight = self.conv.weight.to(x.dtype)
        bias = None if self.conv.bias is None else self.conv.bias.to(x.dtype)
        out = F.conv1d(full, weight, bias, groups=weight.shape[0]).transpose(1, 2)
        if self.activation == "silu":
            out = F.silu(out)
        taps = self.kernel_size - 1
        if lengths is None:
            return out, full[..., full.shape[-1] - taps:]
        # Row b's last taps inputs sit at lengths[b] .. lengths[b] + taps - 1 of `full`.
        index = lengths.view(-1, 1, 1) + torch.arange(taps, device=x.device)
        return out, full.gather(-1, index.expand(-1, full.shape[1], -1))
