"""The delta rule: op.py (the function), chunk.py (chunked kernel), naive.py."""

from linarena.attention.engine.delta.op import delta_rule

__all__ = ["delta_rule"]
