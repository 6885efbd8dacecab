"""Errors that end a run with a one-paragraph message instead of a traceback."""


class LinarenaError(Exception):
    """Base class: train.py prints the message and exits non-zero."""


class ConfigError(LinarenaError):
    """The composed configuration is inconsistent; the message names the key to change."""


class NonFiniteLossError(LinarenaError):
    """The loss or the gradients became NaN or infinite during training."""
