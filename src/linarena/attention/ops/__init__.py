"""Functional linear recurrences in linarena's layout (batch, heads, n, dim): gated linear
attention (RetNet, GLA, Mamba-2's SSD) and the delta rule (DeltaNet, Gated DeltaNet), causal
and bidirectional, chunked, with initial and final states."""

from linarena.attention.ops.delta import delta_rule
from linarena.attention.ops.gated import gated_linear_attention

__all__ = ["delta_rule", "gated_linear_attention"]
