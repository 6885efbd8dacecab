"""The delta rule: op.py (the function), chunk.py (chunked kernel), step.py (one
token), naive.py."""

from linarena.attention.engine.delta.op import delta_rule
from linarena.attention.engine.delta.step import delta_rule_step

__all__ = ["delta_rule", "delta_rule_step"]
