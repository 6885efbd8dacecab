"""Silences, by message, the library output that is noise in every run (train.py calls
:func:`silence_library_noise` once). Anything not matched here is still printed."""

from __future__ import annotations

import logging
import warnings

# (logger name, text in the message): log records dropped.
DROPPED_LOG_RECORDS = (
    # An advertisement printed at every Trainer construction.
    ("lightning.pytorch.utilities.rank_zero", "try installing [litlogger]"),
    # Said because callbacks/default.yaml brings its own summary (CompactModelSummary): intended.
    ("lightning.pytorch.utilities.rank_zero", "Trainer already configured with model summary"),
)
# Warning messages (regular expressions matched at the start) ignored.
IGNORED_WARNINGS = (
    # Lightning's own pytree helper calls an API torch deprecated; nothing a user can change.
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    # torchdata's StatefulDataLoader calls torch.set_vital, which torch deprecated.
    r"'set_vital' is deprecated",
)
# On resume only: the checkpoint folder of the run being resumed is expected to hold checkpoints
# (for a new run in an old folder the warning stays: it would overwrite them).
IGNORED_ON_RESUME = (r"Checkpoint directory .* exists and is not empty",)


class _DropMessages(logging.Filter):
    def __init__(self, texts: tuple[str, ...]) -> None:
        super().__init__()
        self.texts = texts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in self.texts)


def silence_library_noise(resuming: bool = False) -> None:
    """Install the filters above (idempotent); `resuming`: the run continues a checkpoint."""
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, text in DROPPED_LOG_RECORDS:
        by_logger[name] = (*by_logger.get(name, ()), text)
    for name, texts in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(texts))
    for message in IGNORED_WARNINGS + (IGNORED_ON_RESUME if resuming else ()):
        warnings.filterwarnings("ignore", message=message)
