"""Training: LightningModule, optimizer and schedule, W&B setup, config checks, run entry.

ClassificationModule and train load on first use (PEP 562): `python train.py` imports
linarena.training.environment before Hydra composes the config, and a typo in the command line
must be reported without waiting for Lightning to load (seconds)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from linarena.errors import ConfigError, LinarenaError, NonFiniteStateError

if TYPE_CHECKING:
    from linarena.training.module import ClassificationModule
    from linarena.training.run import train

__all__ = ["ClassificationModule", "ConfigError", "LinarenaError", "NonFiniteStateError", "train"]


def __getattr__(name: str) -> Any:
    if name == "ClassificationModule":
        from linarena.training.module import ClassificationModule

        return ClassificationModule
    if name == "train":
        from linarena.training.run import train

        return train
    raise AttributeError(f"module 'linarena.training' has no attribute {name!r}")
