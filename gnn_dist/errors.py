"""Errors the CLI turns into one line and exit code 2; torch-free, so commands that never train stay light."""
from __future__ import annotations


class LaunchError(RuntimeError):
    """The job cannot start (or go on) as launched; the message says why."""
