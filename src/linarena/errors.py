"""The one root of the errors a user can act on: the entry point and the scripts catch
:class:`LinarenaError`, print its message (one line or paragraph saying what was wrong and what to
change) and exit non-zero instead of showing a traceback.

Each package raises the subclass that fits; a subclass may also derive from a builtin (e.g.
``DataNotFoundError(DataError, FileNotFoundError)``) so that callers catching the builtin keep
working.
"""

from __future__ import annotations


class LinarenaError(Exception):
    """Base class: the message says what was wrong and how to fix it.

    Attributes:
        exit_code: the process exit status the entry point uses (1 unless a subclass says).
    """

    exit_code: int = 1


class ConfigError(LinarenaError):
    """The composed configuration is inconsistent; the message names the key to change."""


class DataError(LinarenaError):
    """The data a task needs are missing, malformed or do not fit the data.* settings."""


class CheckpointError(LinarenaError):
    """A checkpoint cannot be used: unreadable, of another model, or holding NaN/inf."""


class ResumeError(ConfigError):
    """A resume is not possible as asked (a change that alters the run, a run folder in use)."""


class ResourceError(LinarenaError):
    """The machine lacks what the run needs: memory, disk space, a writable folder, a device."""


class NonFiniteStateError(LinarenaError):
    """Training diverged: the weights or optimizer state became NaN or infinite.

    Attributes:
        lr: the learning rate the run was training with (the advice suggests a tenth of it).
    """

    def __init__(self, message: str, lr: float | None = None) -> None:
        super().__init__(message)
        self.lr = lr
