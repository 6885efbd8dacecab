"""Gated linear attention: op.py (the function), chunk.py (chunked kernel), naive.py."""

from linarena.attention.engine.gated.op import gated_linear_attention

__all__ = ["gated_linear_attention"]
