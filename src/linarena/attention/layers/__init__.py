"""Whole attention layers as their papers publish them (linarena.attention.layers.base): each
maps x (batch, n, d_model) to (batch, n, d_model) with its own projections, convolutions, gates
and norms. Picked as attention=<name>_layer (conf/attention/)."""

from linarena.attention.layers.base import AttentionLayer, LayerState, build_attention
from linarena.attention.layers.based import BasedLayer
from linarena.attention.layers.conv import CausalConv
from linarena.attention.layers.deltanet import DeltaNetLayer
from linarena.attention.layers.gated_deltanet import GatedDeltaNetLayer
from linarena.attention.layers.gla import GLALayer
from linarena.attention.layers.mamba2 import Mamba2Layer
from linarena.attention.layers.retnet import RetNetLayer

__all__ = [
    "AttentionLayer",
    "BasedLayer",
    "CausalConv",
    "DeltaNetLayer",
    "GLALayer",
    "GatedDeltaNetLayer",
    "LayerState",
    "Mamba2Layer",
    "RetNetLayer",
    "build_attention",
]
