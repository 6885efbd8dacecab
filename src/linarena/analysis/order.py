"""The order tasks and attentions are listed in, in tables and figures, and attention labels.

The attentions and their labels come from conf/attention/ (linarena.attention.variants), read on
first use."""

from __future__ import annotations

from linarena.attention.patterns import is_pattern_name, pattern_label
from linarena.attention.variants import variant_names

# The LRA tasks in the LRA paper's order (Tay et al. 2021, Table 1), each beside its small
# version, then MQAR: a fact about the benchmarks, not a registry. Any other task of conf/data/
# (a new one needs no line here) follows alphabetically.
LRA_TASK_ORDER = ("listops", "listops_small", "text", "retrieval", "image", "pathfinder",
                  "pathx", "mqar")


def attention_order() -> tuple[str, ...]:
    """The variants of conf/attention/ in the registry's order (cached by the registry)."""
    return tuple(variant_names())


def task_sort_key(task: str) -> tuple[int, str]:
    """The LRA tasks in LRA order, then any other name alphabetically."""
    known = LRA_TASK_ORDER.index(task) if task in LRA_TASK_ORDER else len(LRA_TASK_ORDER)
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
