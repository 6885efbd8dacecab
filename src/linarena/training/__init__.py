"""Training: LightningModule, optimizer and schedule, W&B setup, config checks, run entry."""

from linarena.errors import ConfigError, LinarenaError, NonFiniteStateError
from linarena.training.module import ClassificationModule
from linarena.training.run import train

__all__ = ["ClassificationModule", "ConfigError", "LinarenaError", "NonFiniteStateError", "train"]
