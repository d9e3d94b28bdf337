"""Errors that every rank meets alike, printed once: by the lowest rank that met one, for all of them.

Why: under mpiexec every rank's stderr reaches the terminal, so a bad flag or a missing file that all
ranks meet printed one identical line per rank; and the first rank to end the job killed the others,
so which of their lines got out was a race. Now a failing rank sends its message to every peer, point
to point over MPI (never a collective: a healthy peer would never join it), and listens `GRACE_S` for
theirs. The lowest failing rank it has heard of prints each distinct message once, prefixed with the
ranks that met it, and then tells every peer which ranks its lines covered. A rank that heard of a lower
one prints nothing if that rank covered it, and its own line if not (or if no word comes within
`COVER_S`). A rank that fails more than a grace period after the first is on its own, as before: the
first failure ends the job.

Only MPI launches (mpiexec) take part, and only where MPI runs or will run on every rank: under torchrun
each rank prints its own line, as before.
"""
from __future__ import annotations

import ctypes
import fcntl
import json
import os
import stat
import struct
import sys
import termios
import time
from typing import Callable

GRACE_S = 1.0  # how long a failing rank listens for its peers' messages (ranks meet an alike error this close)
COVER_S = 4.0  # how long a quiet rank waits for the lowest rank's word that its line is printed
TAG, COVER_TAG = 0x6E64, 0x6E65  # MPI tags on COMM_WORLD (the halo transport uses a duplicate of it)
_SENT: list = []  # pending sends and their buffers: kept alive until the process ends

Render = Callable[[str, str], str]  # (who, message) -> the line, e.g. ("[ranks 0-3] ", "no such file") -> ...


def mpi_world() -> tuple[int, int] | None:
    """(rank, size) of an MPI launch of two or more ranks, from the launcher's environment; else None.
    torchrun's variables win, as in `launch.init`: workers torchrun started under an MPI launcher share its
    PMI rank."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return None
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


def report(message: str, render: Render, stream=None, start_mpi: bool = True) -> None:
    """Print `message` once for every rank that meets it (see the module's docstring); returns when printed
    (by this rank, or by a lower one that said so).

    Outside an MPI launch of two or more ranks, or where MPI cannot be reached, it is printed at once,
    prefixed with this rank where there is one. `start_mpi=False`: a command whose peers may never start
    MPI (MPI_Init waits for every rank), so MPI is used only if this process already runs it.
    """
    stream = stream or sys.stderr
    world = mpi_world()
    comm = _comm(start_mpi) if world else None
    heard = _exchange(comm, message, *world) if comm is not None else None
    if heard is None:
        _write(stream, render(who([world[0]], world[1]) if world else "", message))
        return
    rank, size = world
    if min(heard) < rank:  # a lower rank prints for every rank it heard: did it hear us?
        if rank not in _covered(comm):
            _write(stream, render(who([rank], size), message))
        return
    groups: dict[str, list[int]] = {}
    for r in sorted(heard):
        groups.setdefault(heard[r], []).append(r)
    _write(stream, "\n".join(render(who(ranks, size), text) for text, ranks in groups.items()))
    wait_until_read((2,))  # on the launcher's side before any peer, told it is covered, leaves and ends the job
    _send(comm, json.dumps(sorted(heard)).encode(), [r for r in range(size) if r != rank], COVER_TAG)


def _comm(start_mpi: bool):
    """COMM_WORLD, or None: mpi4py missing, MPI finalized, or not running here and not to be started."""
    if not start_mpi and "mpi4py.MPI" not in sys.modules:
        return None
    try:
        from mpi4py import MPI  # starts MPI where it is not running yet

        return MPI.COMM_WORLD if MPI.Is_initialized() and not MPI.Is_finalized() else None
    except Exception:
        return None


def _send(comm, data: bytes, peers: list[int], tag: int) -> None:
    """Non-blocking sends of `data` to each of `peers`; one that fails is skipped."""
    from mpi4py import MPI

    for peer in peers:
        try:
            _SENT.append((comm.Isend([data, MPI.BYTE], dest=peer, tag=tag), data))
        except Exception:
            continue


def _receive(comm, tag: int, until: Callable[[dict], bool], wait_s: float) -> dict[int, bytes]:
    """{source: message} of `tag` that arrive within `wait_s`, or until `until(received)` holds."""
    from mpi4py import MPI

    got, status = {}, MPI.Status()
    deadline = time.monotonic() + wait_s
    try:
        while not until(got) and time.monotonic() < deadline:
            if comm.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
                buf = bytearray(status.Get_count(MPI.BYTE))
                comm.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=tag)
                got[status.Get_source()] = bytes(buf)
            else:
                time.sleep(0.01)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting for the peers
        pass
    return got


def _exchange(comm, message: str, rank: int, size: int) -> dict[int, str] | None:
    """Send `message` to every peer and gather theirs for GRACE_S (or until all have come): {rank: message}."""
    try:
        _send(comm, message.encode(), [r for r in range(size) if r != rank], TAG)
        got = _receive(comm, TAG, lambda g: len(g) == size - 1, GRACE_S)
    except Exception:  # MPI broke: every rank prints its own line, as without a launcher
        return None
    return {rank: message, **{r: m.decode(errors="replace") for r, m in got.items()}}


def _covered(comm) -> list[int]:
    """The ranks whose lines the lowest failing rank printed, as it tells them; [] if no word comes in time."""
    try:
        got = _receive(comm, COVER_TAG, bool, COVER_S)
        return [r for m in got.values() for r in json.loads(m)]
    except Exception:
        return []


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
