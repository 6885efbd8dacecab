"""Gated linear attention: op.py (the function), chunk.py (chunked kernel), step.py (one
token), naive.py."""

from linarena.attention.engine.gated.op import gated_linear_attention
from linarena.attention.engine.gated.step import gated_linear_attention_step

__all__ = ["gated_linear_attention", "gated_linear_attention_step"]
