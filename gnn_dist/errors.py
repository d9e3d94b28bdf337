"""Errors the CLI turns into one line and exit code 2; torch-free, so commands that never train stay light."""
from __future__ import annotations


class LaunchError(RuntimeError):
    """The job cannot start (or go on) as launched; the message says why."""


class InputError(ValueError):
    """The data or settings handed to the runtime cannot work (e.g. no training nodes); one line, exit 2.

    Kept apart from ValueError at large, so that a ValueError raised in a user's layer is reported as
    that layer's error, not as a usage error.
    """
