"""The order tasks and attentions are listed in, in tables and figures."""

from __future__ import annotations

# Task names are the data config names (conf/data/).
TASK_ORDER = ("listops", "listops_small", "text", "retrieval", "image", "pathfinder", "pathx",
              "mqar")
ATTENTION_ORDER = ("softmax", "elu", "performer", "cosformer")


def task_sort_key(task: str) -> tuple[int, str]:
    """Known tasks in LRA order, then any other name alphabetically."""
    known = TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER)
    return known, task


def attention_sort_key(name: str) -> tuple[int, str]:
    """Known attentions in their usual order (baseline first), then any other name alphabetically."""
    known = ATTENTION_ORDER.index(name) if name in ATTENTION_ORDER else len(ATTENTION_ORDER)
    return known, name
