"""The order tasks and attentions are listed in, in tables and figures, and attention labels.

The attentions and their labels come from conf/attention/ (linarena.attention.variants), read on
first use."""

from __future__ import annotations

from linarena.attention.patterns import is_pattern_name, pattern_label
from linarena.attention.variants import variant_names

# Task names are the data config names (conf/data/).
TASK_ORDER = ("listops", "listops_small", "text", "retrieval", "image", "pathfinder", "pathx",
              "mqar")


def attention_order() -> tuple[str, ...]:
    """The variants of conf/attention/ in the registry's order (cached by the registry)."""
    return tuple(variant_names())


def task_sort_key(task: str) -> tuple[int, str]:
    """Known tasks in LRA order, then any other name alphabetically."""
    known = TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)
    return known, task


def attention_sort_key(name: str) -> tuple[int, str]:
    """The variants of conf/attention/ in the registry's order (exact baseline first), then any
    other name alphabetically."""
    order = attention_order()
    known = order.index(name) if name in order else len(order)
    return known, name


def attention_label(name: str) -> str:
    """The display label a variant declares (`attention_label`), a hybrid's label made of its
    variants' ("Gated DeltaNet ×2 + softmax"), or the name itself."""
    return pattern_label(name) if is_pattern_name(name) else name
