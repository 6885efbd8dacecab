"""Attention modules: exact softmax, and LinearAttention composed with a FeatureMap.

All take q, k, v of shape (batch, heads, length, head_dim) and an optional bool key-padding
mask (batch, length), True for real tokens (right padding), and return (batch, heads, length,
head_dim). The recurrences with decay, gates or the delta rule (RetNet, GLA, Mamba-2, DeltaNet,
Gated DeltaNet) are in linarena.attention.recurrent, on the functional ops of
linarena.attention.engine. The variants a config can pick are the files of conf/attention/; each
takes backend=auto|torch|fla (which code runs a call: linarena.attention.engine.backend).
"""

from linarena.attention.cosformer import CosformerAttention
from linarena.attention.elu import EluAttention
from linarena.attention.engine.linear import LinearAttentionState
from linarena.attention.feature_map import FeatureMap
from linarena.attention.linear import LinearAttention
from linarena.attention.performer import PerformerAttention
from linarena.attention.sliding_window import SlidingWindowAttention, WindowState
from linarena.attention.softmax import SoftmaxAttention

__all__ = [
    "CosformerAttention",
    "EluAttention",
    "FeatureMap",
    "LinearAttention",
    "LinearAttentionState",
    "PerformerAttention",
    "SlidingWindowAttention",
    "SoftmaxAttention",
    "WindowState",
]
