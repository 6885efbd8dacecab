"""Whole attention layers as their papers publish them (linarena.attention.layers.base): each
maps x (batch, n, d_model) to (batch, n, d_model) with its own projections, convolutions, gates
and norms. Picked as attention=<name>_layer (conf/attention/)."""

from linarena.attention.layers.base import AttentionLayer, LayerState, build_attention
from linarena.attention.layers.conv import CausalConv

__all__ = ["AttentionLayer", "CausalConv", "LayerState", "build_attention"]
