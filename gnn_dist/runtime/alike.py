"""Errors that every rank meets alike, printed once: by the lowest rank that met one, for all of them.

Why: under mpiexec every rank's stderr reaches the terminal, so a bad flag or a missing file that all
ranks meet printed one identical line per rank; and the first rank to end the job killed the others,
so which of their lines got out was a race. Now a failing rank sends its message to every peer, point
to point over MPI (never a collective: a healthy peer would never join it), and listens `GRACE_S` for
theirs. The lowest failing rank it has heard of prints each distinct message once, prefixed with the
ranks that met it, then the caller ends the job (MPI_Abort). The others print nothing and wait to be
ended; one that is still alive `QUIET_S` later prints its own line after all.

Only MPI launches (mpiexec) take part: under torchrun each rank prints its own line, as before.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import stat
import struct
import sys
import termios
import time
from typing import Callable

GRACE_S = 1.0  # how long a failing rank listens for its peers' messages (ranks meet an alike error this close)
QUIET_S = 10.0  # a quiet rank not ended this long after its grace prints its own line
TAG = 0x6E64  # the MPI tag of these messages, on COMM_WORLD (the halo transport uses a duplicate of it)
_SENT: list = []  # pending sends and their buffers: kept alive until the process ends

Render = Callable[[str, str], str]  # (who, message) -> the line, e.g. ("[ranks 0-3] ", "no such file") -> ...


def mpi_world() -> tuple[int, int] | None:
    """(rank, size) of an MPI launch of two or more ranks, from the launcher's environment; else None."""
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        try:
            rank, size = int(os.environ[rank_var]), int(os.environ[size_var])
        except (KeyError, ValueError):
            continue
        if size > 1:
            return rank, size
    return None


def who(ranks: list[int], size: int) -> str:
    """The prefix naming `ranks`: "[rank 2] ", "[ranks 0-3] " (every rank: "[all 4 ranks] "), "[ranks 1,3] "."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"[rank {ranks[0]}] "
    if len(ranks) == size:
        return f"[all {size} ranks] "
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"[ranks {ranks[0]}-{ranks[-1]}] "
    return f"[ranks {','.join(map(str, ranks))}] "


def report(message: str, render: Render, stream=None) -> None:
    """Print `message` once for every rank that meets it (see the module's docstring); returns when printed.

    Outside an MPI launch of two or more ranks, or where MPI cannot be reached, it is printed at once,
    prefixed with this rank where there is one. A quiet rank returns only if nobody ended it in time.
    """
    stream = stream or sys.stderr
    world = mpi_world()
    heard = _exchange(message, *world) if world else None
    if heard is None:
        _write(stream, render(who([world[0]], world[1]) if world else "", message))
        return
    rank, size = world
    if min(heard) < rank:  # a lower rank prints for us all; it ends the job once it has
        time.sleep(QUIET_S)
        _write(stream, render(who([rank], size), message))
        return
    groups: dict[str, list[int]] = {}
    for r in sorted(heard):
        groups.setdefault(heard[r], []).append(r)
    _write(stream, "".join(render(who(ranks, size), text) + "\n" for text, ranks in groups.items()).rstrip("\n"))


def _exchange(message: str, rank: int, size: int) -> dict[int, str] | None:
    """Send `message` to every peer and gather theirs for GRACE_S (or until all have come): {rank: message}."""
    try:
        from mpi4py import MPI

        if not MPI.Is_initialized() or MPI.Is_finalized():
            return None
        comm = MPI.COMM_WORLD
        data = message.encode()
        for peer in range(size):
            if peer != rank:
                _SENT.append((comm.Isend([data, MPI.BYTE], dest=peer, tag=TAG), data))
        heard, status = {rank: message}, MPI.Status()
        deadline = time.monotonic() + GRACE_S
        while len(heard) < size and time.monotonic() < deadline:
            if comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=status):
                buf = bytearray(status.Get_count(MPI.BYTE))
                comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=TAG)
                heard[status.Get_source()] = bytes(buf).decode(errors="replace")
            else:
                time.sleep(0.01)
        return heard
    except Exception:  # no MPI here, or it broke: every rank prints its own line, as without a launcher
        return None


def _write(stream, text: str) -> None:
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):  # the launcher may already have closed our stderr
        pass


_HANDLERS: list = []  # exit handlers handed to libc: kept alive


def mpi_abort(code: int) -> None:
    """End every rank of an mpiexec launch now, mpiexec itself exiting with `code`.

    Why not just exit: MPICH's hydra (5.0.2) kills the other ranks as soon as one ends without
    MPI_Finalize, and records the status of a rank it killed only when it happens to reap it early
    (9), so mpiexec's code would race between `code` and 9. On an MPI_Abort, mpiexec kills every rank and
    exits with the abort's code. MPICH then prints "Abort(N) on node R ..." and calls exit(), which would
    run C++ static destructors beside gloo's live threads: stderr goes to /dev/null first (this rank's
    line is already out), and an exit handler registered last leaves with os._exit before any destructor.
    Before aborting, the rank waits (at most a second) until the launcher has read what it printed: an
    abort that overtakes the line in hydra's proxy loses it (seen on a loaded 2-core box).
    """
    from mpi4py import MPI

    if not MPI.Is_initialized() or MPI.Is_finalized():
        return
    handler = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: os._exit(code))
    _HANDLERS.append(handler)
    ctypes.CDLL(None).__cxa_atexit(handler, None, None)
    wait_until_read((1, 2))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    MPI.COMM_WORLD.Abort(code)



def wait_until_read(fds: tuple[int, ...], limit_s: float = 1.0) -> None:
    """Return once the pipes behind `fds` are empty (their reader has taken every byte), or after `limit_s`.

    Linux answers FIONREAD on either end of a pipe with the bytes still in it. Files and terminals are
    not waited for: what is written to them is already where it goes.
    """
    deadline = time.monotonic() + limit_s
    for fd in fds:
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            while time.monotonic() < deadline:
                left = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
                if left == 0:
                    break
                time.sleep(0.005)
        except OSError:
            continue
