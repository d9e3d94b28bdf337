"""What ended a rank, told in one line: whose error it was, and the exit code it leaves with.

One line per failing rank is the rule (docs/layers.md, "Errors and exit"); the
traceback comes with `--debug` or `GNN_DIST_DEBUG=1`. A rank's own error (its
model code, its script, its partition files) is told apart from a broken
collective, which only means that a peer went away first.
"""
from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist

from partition.errors import GnnDistError

DEBUG_ENV = "GNN_DIST_DEBUG"  # set (to anything but 0 or empty) for whole tracebacks; `--debug` sets it
TRANSPORT_ERRORS = ("third_party/gloo", "gloo/transport", "NCCL error", "Connection closed by peer",
                    "Connection reset by peer", "Socket Timeout")
_PKG_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))  # torch, gnn_dist.runtime


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def exit_code(exc: BaseException) -> int:
    """sys.exit's own code; 2 for an error a user can fix (cli/main.py's kinds); 130 for Ctrl-C; else 1."""
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    if isinstance(exc, GnnDistError):
        return 2
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


def is_collective_failure(exc: BaseException) -> bool:
    """Did `exc` come out of a collective (a peer gone, a timeout) rather than out of model code?

    Yes if torch says so (DistError), if the innermost frame is torch.distributed's or waits on a
    collective's work handle, or if the message is a transport's (gloo, NCCL).
    """
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        if f"torch{os.sep}distributed" in last.filename or ".wait()" in (last.line or ""):
            return True
    return any(s in str(exc) for s in TRANSPORT_ERRORS)


def _user_frame(exc: BaseException):
    """The innermost frame of `exc`'s traceback outside torch and gnn-dist's runtime (layers and loops count)."""
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if not f.filename.startswith(_PKG_DIRS + ("<frozen ",))]  # (site's exit(), quit())
    return (user or frames or [None])[-1]


def describe_user_error(exc: BaseException) -> str:
    """One line: the error and the innermost frame outside torch and the runtime that raised it."""
    frame = _user_frame(exc)
    where = f" in {frame.filename}:{frame.lineno} ({frame.name})" if frame is not None else ""
    if isinstance(exc, SystemExit):
        return exit_line(exc.code, where)
    if isinstance(exc, GnnDistError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}{where}: {text} (--debug or {DEBUG_ENV}=1 shows the traceback)"


def exit_line(status, where: str) -> str:
    """`sys.exit(3) in FILE:LINE (FUNCTION)`: what a rank that left on purpose with a non-zero code prints."""
    return f"sys.exit({status!r}){where}"


def print_traceback(exc: BaseException) -> None:
    """The whole traceback, when asked for (`debug()`), before the one line."""
    if debug():
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
