"""Attention modules: exact softmax and three linear variants sharing one kernel.

All take q, k, v of shape (batch, heads, length, head_dim) and an optional bool key-padding
mask (batch, length), True for real tokens, and return (batch, heads, length, head_dim).
"""

from linarena.attention.cosformer import CosformerAttention
from linarena.attention.elu import EluAttention
from linarena.attention.linear import LinearAttention
from linarena.attention.linear_kernels import LinearAttentionState
from linarena.attention.performer import PerformerAttention
from linarena.attention.softmax import SoftmaxAttention

__all__ = [
    "CosformerAttention",
    "EluAttention",
    "LinearAttention",
    "LinearAttentionState",
    "PerformerAttention",
    "SoftmaxAttention",
]
