"""Capture's one error: the program cannot be captured."""


class CaptureError(ValueError):
    """The program cannot be captured; the message says why and, where it can, names the line."""
