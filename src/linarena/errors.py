"""The root of every error linarena raises for a problem the user can fix: the entry points
catch it and print its message (which says what is wrong and how to fix it), not a traceback."""


class LinarenaError(Exception):
    """A failure whose message already says what is wrong and what to change."""
