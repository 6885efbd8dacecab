"""What a task's datamodule promises the model and the training loop, stated once, checked when
the datamodule is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from linarena.data.batching import PAD_ID
from linarena.data.errors import DataConfigError

# "sequence": one label per sequence; "pair": one label per pair of documents (tokens
# (B, 2, L)); "token": one label per position (-100 where not scored).
HEAD_KINDS = ("sequence", "pair", "token")


@dataclass(frozen=True)
class TaskSpec:
    """A task's contract with the model: batches have token ids in [0, vocab_size), padding
    `pad_id` on the right of each sequence, sequences of at most `max_length` tokens, and labels
    in [0, num_classes) (token tasks: -100 at unscored positions).

    Attributes:
        name: cache file prefix and the name in log lines, e.g. "listops", "pathfinder32".
        head_kind: one of HEAD_KINDS.
        vocab_size: number of token ids, padding included.
        num_classes: number of output classes.
        max_length: longest sequence (each document of a pair), from data.max_length.
        causal: the task is meant for causal attention (model.causal=true): each position's
            label is predicted from the tokens up to it (MQAR, as in Zoology). False (the
            default) for tasks that classify whole sequences.

    The padding id, `pad_id`, is PAD_ID (0) for every task: the model masks that id.
    """

    name: str
    head_kind: str
    vocab_size: int
    num_classes: int
    max_length: int
    causal: bool = False
    pad_id: ClassVar[int] = PAD_ID

    def __post_init__(self) -> None:
        def fail(problem: str) -> None:
            raise DataConfigError(f"The datamodule of task {self.name!r} {problem}")

        if not isinstance(self.name, str) or not self.name:
            raise DataConfigError("TaskSpec needs a task name (a non-empty str), "
                                  f"got {self.name!r}")
        if self.head_kind not in HEAD_KINDS:
            fail(f"has head_kind={self.head_kind!r}; use one of {', '.join(HEAD_KINDS)}")
        for field, least in (("vocab_size", 2), ("num_classes", 2)):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                fail(f"states {field}={value!r}; it must be an int >= {least}")
        if not isinstance(self.max_length, int) or self.max_length < 1:
            raise DataConfigError(f"data.max_length must be >= 1, got {self.max_length!r}")
        if not isinstance(self.causal, bool):
            fail(f"states causal={self.causal!r}; it must be True or False")
