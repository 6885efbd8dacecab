"""The training errors, defined in :mod:`linarena.errors` (the one error root)."""

from linarena.errors import ConfigError, LinarenaError, NonFiniteStateError

__all__ = ["ConfigError", "LinarenaError", "NonFiniteStateError"]
