"""Linear attentions whose state decays, is gated by the token or is rewritten by the delta
rule, on linarena.attention.engine: RetNet, GLA, Mamba-2 (SSD), DeltaNet, Gated DeltaNet."""

from linarena.attention.recurrent.core import RecurrentAttention, RecurrentState
from linarena.attention.recurrent.deltanet import DeltaNetAttention
from linarena.attention.recurrent.gated_deltanet import GatedDeltaNetAttention
from linarena.attention.recurrent.gla import GLAAttention
from linarena.attention.recurrent.mamba2 import Mamba2Attention
from linarena.attention.recurrent.output_norm import OUTPUT_NORMS, OutputNorm
from linarena.attention.recurrent.retnet import RetNetAttention

__all__ = [
    "OUTPUT_NORMS",
    "DeltaNetAttention",
    "GLAAttention",
    "GatedDeltaNetAttention",
    "Mamba2Attention",
    "OutputNorm",
    "RecurrentAttention",
    "RecurrentState",
    "RetNetAttention",
]
