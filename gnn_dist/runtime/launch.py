"""From an MPI (or torchrun) launch to a ready torch.distributed context, and out again (docs/design.md §9).

MPI learns rank and size and agrees on a rendezvous (`gnn_dist.runtime.rendezvous`); tensors travel over
torch.distributed (gloo on CPU, NCCL on GPU, gloo through host copies where ranks share a GPU:
`gnn_dist.runtime.placement`), except CPU halo all-to-alls under mpiexec, which MPI carries where blocks
are small (`gnn_dist.runtime.transport`: 75x less latency). Halo traffic gets its own process
group so a background exchange never interleaves with the gradient all-reduce.

Leaving is the other half. A rank's sentinel process (`gnn_dist.runtime.sentinel`) beats for it and tells
it when a peer failed or was lost; a rank that fails on its own (an exception or `sys.exit(n)` in a
script, a partition file that fails its checksum) prints one line, publishes its exit code, and every
peer leaves within a second or two with that same code, printing nothing more. Equal codes matter:
MPICH's mpiexec reports the first non-zero code it sees (and ORs codes that arrive together).
"""
from __future__ import annotations

import atexit
import builtins
import datetime
import gc
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import NoReturn

import torch
import torch.distributed as dist

from gnn_dist.errors import GnnDistError, LaunchError
from gnn_dist.runtime import alike, cgroups, gpus, placement, tuning
from gnn_dist.runtime import transport as halo_transport
from gnn_dist.runtime.failure import debug, describe_user_error, exit_code, exit_line, is_collective_failure, print_traceback
from gnn_dist.runtime.malloc import keep_freed_memory
from gnn_dist.runtime.rendezvous import Rendezvous, gloo_interface, mpi_rendezvous, mpi_store
from gnn_dist.runtime.sentinel import Failure, Sentinel, Spec

__all__ = ["DistContext", "init", "close_all", "describe_user_error", "is_collective_failure"]

# Objects in reference cycles (exchange <-> policy, context <-> its failure hooks) keep process groups alive
# until the interpreter's final collection, where destroying gloo's C++ objects can abort the process
# ("terminate called without an active exception"): collect them at exit, while the interpreter is whole.
atexit.register(gc.collect)
_OPEN: list["DistContext"] = []  # contexts not yet closed; closed at exit (registered after gc.collect: runs first)
_EXIT: dict = {}  # sys.exit's status and caller, for a context that meets interpreter exit outside `with`
_LEAVE_WITH: list[int] = []  # an exit code to leave with once the interpreter has run its exit handlers
_STARTED = [0]  # contexts started by this process: each gets its own keys in the store
DRAIN_S = 1.5  # rank 0, whose process holds the store, waits at most this long for its peers to go first


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    local_size: int
    device: torch.device
    backend: str
    halo_group: object = None
    launcher: str = "mpiexec"  # or "torchrun": who started the ranks (and so how a failing rank ends the rest)
    threads: int = 1  # this rank's intra-op threads (torch's, and the numba kernels' split)
    usable_cpus: float = 1.0  # the CPUs this rank's process may use: affinity, or its cgroup quota where smaller
    sentinel: Sentinel | None = None
    on_fail: list = field(default_factory=list)  # callables(message) run before a failing rank exits
    closed: bool = False
    _failing: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __enter__(self) -> "DistContext":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or self.world_size == 1 or (isinstance(exc, SystemExit) and exit_code(exc) == 0):
            self.close(clean=exc is None or isinstance(exc, SystemExit))
            return False
        self.leave_on(exc)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def leave_on(self, exc: BaseException) -> NoReturn:
        """Leave because `exc` ended this rank's work.

        A broken collective means a peer went first: leave as its sentinel says
        (quietly with a peer's own code, or naming a lost rank). Anything else
        is this rank's own error: one line (the traceback before it with
        GNN_DIST_DEBUG=1), published so that every peer leaves with its code.
        Ctrl-C is neither: mpiexec hands it to every rank, most of them waiting in
        a collective; each leaves at once with 130, as the CLI does.
        """
        if isinstance(exc, KeyboardInterrupt):
            self.fail(describe_user_error(exc), code=exit_code(exc), publish=True)
        if is_collective_failure(exc):
            peer = self.sentinel.wait_failure(3.0) if self.sentinel is not None else None
            if peer is not None and peer.rank != self.rank:
                self.fail(peer.line(), code=peer.code)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.fail(f"collective failed: {text}", code=1, publish=True)
        print_traceback(exc)
        self.fail(describe_user_error(exc), code=exit_code(exc), publish=True)

    def fail(self, message: str | None, code: int = 1, publish: bool = False) -> NoReturn:
        """Print `message` with the rank prefix (None: nothing) and leave now, without waiting on peers.

        `publish` tells every peer that this rank failed on its own, so they
        leave at once, quietly and with `code`: under mpiexec by MPI_Abort,
        after which mpiexec ends every rank and exits with `code`
        (`alike.mpi_abort`); otherwise through the store, where rank 0,
        whose process holds it, waits (at most DRAIN_S) until its peers have
        gone. The first failure
        in a process wins: a second thread failing meanwhile (the main
        thread's broken collective while the sentinel's news is acted on)
        waits for that exit instead of reporting a second, vaguer reason.
        """
        if not self._failing.acquire(blocking=False):
            time.sleep(30.0)
            os._exit(code)
        for hook in self.on_fail if message is not None else ():  # e.g. the trainer notes it in its JSONL log
            try:
                hook(message)
            except Exception:
                pass
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # the launcher may already have closed our output
            pass
        if message is not None:  # under mpiexec once, by the lowest rank that met it (gnn_dist.runtime.alike)
            alike.report(message, lambda who, text: f"{who or f'[rank {self.rank}] '}gnn-dist: error: {text}")
        if publish and self.launcher == "mpiexec" and self.world_size > 1:
            alike.mpi_abort(code)
        if self.sentinel is not None:
            if publish:
                self.sentinel.publish(code)
            if self.rank == 0:
                self.sentinel.drain(DRAIN_S)
            self.sentinel.leaving()
        os._exit(code)

    def _told_to_leave(self, failure: Failure) -> None:
        self.fail(failure.line(), code=failure.code)

    def close(self, clean: bool = True) -> None:
        """Leave torch.distributed in an order that cannot abort; called at exit if not before.

        The ranks meet while their sentinels still watch (a peer that fails
        meanwhile still ends this rank); then each stops its sentinel and they
        meet again, so no sentinel calls the store after rank 0 has closed it;
        then the process groups go, and with them gloo's threads, while the
        interpreter is whole. `clean=False` leaves without meeting.
        """
        if self.closed:
            return
        self.closed = True
        if self in _OPEN:
            _OPEN.remove(self)
        if self.halo_group is not None:
            halo_transport.release(self.halo_group)
        try:
            if self.distributed and clean:
                self._meet_or_fail()
            if self.sentinel is not None:
                self.sentinel.stop()
            if self.distributed and clean:
                self._meet()
        except Exception:
            pass
        finally:
            if self.distributed:
                dist.destroy_process_group()
        gc.collect()

    def _meet_or_fail(self) -> None:
        """Meet the peers on the way out; peers that never come (they wait in a collective for a rank that left
        its script early, e.g. by a bare `raise SystemExit` that nothing saw) make it this rank's failure, so
        that they leave too, within the collective timeout, instead of waiting for ever."""
        try:
            self._meet()
        except Exception as e:
            if self.world_size > 1 and not isinstance(e, KeyboardInterrupt):
                peer = self.sentinel.wait_failure(3.0) if self.sentinel is not None else None
                if peer is not None and peer.rank != self.rank:  # a peer failed: it said why, we leave with it
                    self.fail(peer.line(), code=peer.code)
                self.fail("left its script while its peers were still running (they did not reach the end within "
                          "--timeout): a `raise SystemExit` outside `with gd.init()`?", code=1, publish=True)
            raise

    def _meet(self) -> None:
        if self.backend == "gloo" and self.world_size > 1:
            dist.monitored_barrier(wait_all_ranks=True)
        else:
            dist.barrier()


def close_all(code: int = 0) -> None:
    """Close every context still open, on a command's way out with its exit `code` (and at interpreter exit).

    A non-zero code is this rank's failure, already reported: every peer is told and leaves with it.
    """
    for ctx in list(reversed(_OPEN)):
        if code and ctx.world_size > 1:
            ctx.fail(None, code=code, publish=True)
        ctx.close(clean=code == 0)


def _at_exit() -> None:
    """Interpreter exit: a noted `sys.exit(n)`, n != 0, is this rank's failure; otherwise close cleanly.
    Registered at import, so it runs after the handlers a script registers later."""
    code = exit_code(SystemExit(_EXIT["status"])) if _EXIT else 0
    for ctx in list(reversed(_OPEN)):
        if code and ctx.world_size > 1:
            ctx.fail(exit_line(_EXIT["status"], _EXIT["where"]), code=code, publish=True)
        ctx.close()
    if _LEAVE_WITH:  # gnn-dist's own error, uncaught at one rank: the CLI's code, not Python's 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_LEAVE_WITH[0])


atexit.register(_at_exit)


def _leave_on_uncaught(hook):
    """sys.excepthook for a rank with an open context: one line (the traceback with GNN_DIST_DEBUG=1), then
    tell the peers and leave. Without this, a rank whose script raised would wait at exit for peers that
    wait in a collective for it."""
    def excepthook(exc_type, exc, tb):
        ctx = next((c for c in reversed(_OPEN) if c.world_size > 1), None)
        if ctx is None and isinstance(exc, GnnDistError) and not debug():  # one rank: the input's fault, one line
            sys.stderr.write(f"gnn-dist: error: {exc}\n")
            _LEAVE_WITH.append(exit_code(exc))  # 2, as the CLI: _at_exit leaves with it, after every other handler
            return None
        if ctx is None:
            return hook(exc_type, exc, tb)
        ctx.leave_on(exc)
    return excepthook


def _noting_exit(exit_):
    """sys.exit (or the builtin exit and quit), noting its status and caller: SystemExit never reaches an
    excepthook, and an open context must know at interpreter exit whether this rank is leaving on purpose
    with a non-zero code (else it waits in close for peers that wait in a collective for it). A bare
    `raise SystemExit(n)` outside `with gd.init()` is not seen: it fails when its exit meeting times out
    (`DistContext._meet_or_fail`, docs/layers.md)."""
    def exit(status=None):  # noqa: A001 - stands in for sys.exit
        caller = sys._getframe(1)
        _EXIT.update(status=status, where=f" in {caller.f_code.co_filename}:{caller.f_lineno} "
                                          f"({caller.f_code.co_name})")
        exit_(status)
    return exit


def _watch_exits() -> None:
    if not getattr(sys.excepthook, "gnn_dist", False):
        sys.excepthook = _leave_on_uncaught(sys.excepthook)
        sys.excepthook.gnn_dist = True
    for owner, name in ((sys, "exit"), (builtins, "exit"), (builtins, "quit")):  # builtins': site's, scripts use them
        if hasattr(owner, name) and not getattr(getattr(owner, name), "gnn_dist", False):
            setattr(owner, name, _noting_exit(getattr(owner, name)))
            getattr(owner, name).gnn_dist = True


def _torchrun_rendezvous() -> Rendezvous:
    env = os.environ
    return Rendezvous(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                      int(env.get("LOCAL_WORLD_SIZE", 1)), env.get("MASTER_ADDR", "127.0.0.1"),
                      int(env.get("MASTER_PORT", 29500)))


def init(backend: str | None = None, timeout_s: float = 120.0, iface: str | None = None,
         master_addr: str | None = None, expected_world: int | None = None, heartbeat_s: float = 1.0,
         heartbeat_timeout_s: float = 60.0, transport: str = "auto", threads: int | None = None,
         announce: bool = True, gpu_memory_fraction: float | None = None) -> DistContext:
    """Start torch.distributed for this process; `expected_world` is checked before any network setup.

    `backend`: None (NCCL where each rank of a host has a GPU of its own, ranks sharing GPUs staged through
    host memory, the CPU and gloo without CUDA), "gloo" (the CPU), "nccl", or "staged" (GPUs, every
    collective through pinned host memory: nodes without GPUDirect); `gnn_dist.runtime.placement`. Ranks
    share a GPU where two hold the same one (by UUID); each then may use 1/(ranks on it) of its memory, or
    `gpu_memory_fraction` (0 < F <= 1, any GPU rank) where given.

    `transport`: how host halo all-to-alls travel (`gnn_dist.runtime.transport`): "auto" (small plans over
    MPI under an mpiexec launch on gloo, the CPU's or a shared GPU's, with no more ranks than cores per
    host; everything else over torch.distributed) or "gloo" (all of them). `heartbeat_timeout_s`: a rank whose sentinel has not
    beaten for this long is lost (a rank that is merely busy or stopped keeps beating).

    `threads`: this rank's intra-op threads; default the CPUs it may count on (`cgroups.rank_cpus`: its
    affinity over the ranks whose affinity overlaps it, or its cgroup's CPU quota over the ranks under that
    quota, whichever is smaller: containers, SLURM, the network lab's hosts; under torchrun both divisors are
    LOCAL_WORLD_SIZE), at least one. Rank 0
    prints the number once, unless `announce` is False (the CLI's --progress none, or --quiet).

    The context closes itself at interpreter exit (or use `with gd.init() as ctx:`). An exception or
    `sys.exit(n)` on one rank is printed there in one line, and every rank leaves with its code.
    """
    tuning.read_environment()  # the environment's overrides, once, before anything reads them
    if transport not in ("auto", "gloo"):
        raise LaunchError(f"unknown transport '{transport}' (choose auto or gloo)")
    if threads is not None and threads < 1:
        raise LaunchError(f"threads must be >= 1, got {threads}")
    if not (heartbeat_s > 0 and heartbeat_timeout_s > heartbeat_s):
        raise LaunchError(f"the heartbeat timeout ({heartbeat_timeout_s:g} s) must exceed its period "
                          f"({heartbeat_s:g} s)")
    placement.check_fraction(gpu_memory_fraction)
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    rv = _torchrun_rendezvous() if torchrun else mpi_rendezvous(master_addr, iface)
    if expected_world is not None and rv.size != expected_world:
        raise wrong_rank_count(rv.size, "the partition", expected_world)
    usable = cgroups.usable_cpus()
    sharing, in_group = rv.sharing or rv.local_size, rv.in_group or rv.local_size
    per_rank = cgroups.rank_cpus(sharing, in_group)
    chosen = threads if threads is not None else cgroups.threads_per_rank(per_rank)
    torch.set_num_threads(chosen)
    if rv.rank == 0 and announce:
        _say_threads(chosen, per_rank, sharing, in_group, threads is not None)
    keep_freed_memory()
    backend, device = placement.apply(gpus.place(backend, rv, torchrun, gpu_memory_fraction, timeout_s), rv.rank)
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        name = gloo_interface(iface, rv.addr)
        if name:
            os.environ["GLOO_SOCKET_IFNAME"] = name
    ctx = DistContext(rv.rank, rv.size, rv.local_rank, rv.local_size, device, backend,
                      launcher="torchrun" if torchrun else "mpiexec", threads=chosen, usable_cpus=usable)
    _STARTED[0] += 1
    if rv.size > 1:  # forked before any store or gloo thread exists
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '')}"
        spec = Spec(rv.addr, rv.port, rv.rank, rv.size, f"gnn_dist/{run if torchrun else ''}/{_STARTED[0]}/",
                    heartbeat_s, heartbeat_timeout_s, timeout_s)
        ctx.sentinel = Sentinel(spec, ctx._told_to_leave)
    try:
        ctx.halo_group = _process_groups(rv, backend, datetime.timedelta(seconds=timeout_s), torchrun, transport)
    except BaseException:
        if ctx.sentinel is not None:
            ctx.sentinel.stop()
        raise
    _watch_exits()
    _OPEN.append(ctx)
    return ctx


def wrong_rank_count(ranks: int, partition: str, parts: int) -> LaunchError:
    """The one line for a launch whose rank count is not the partition's part count, with the launch it needs."""
    return LaunchError(f"launched with {ranks} rank{'s' * (ranks != 1)} but {partition} has {parts} parts "
                       f"(run mpiexec -n {parts})")


def _say_threads(chosen: int, per_rank: float, sharing: int, in_group: int, given: bool) -> None:
    """One line on rank 0: the threads per rank and where the number comes from."""
    quota = cgroups.cpu_quota()
    plural = lambda n, word: f"{n:.3g} {word}{'s' * (n != 1)}"  # noqa: E731
    why = (f"{plural(cgroups.affinity_cpus(), 'CPU')} in its affinity over {plural(sharing, 'rank')} sharing them"
           + (f", a cgroup quota of {quota:.3g} over {plural(in_group, 'rank')} under it" if quota else ""))
    if given:
        why = "--threads" + (f"; more than its {plural(per_rank, 'CPU')}: threads beyond them wait"
                             if chosen > cgroups.threads_per_rank(per_rank)
                             else "")
    head = f"[gnn-dist] {plural(chosen, 'thread')} per rank"
    sys.stderr.write(f"{head} ({why})\n" if given else f"{head} ({plural(per_rank, 'CPU')} each: {why})\n")


def _host_key() -> str:
    """This rank's host as gloo sees it: the address of the interface gloo binds (GLOO_SOCKET_IFNAME: the
    network lab's hosts differ by it, not by name), else the host's name."""
    import psutil

    iface = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    for a in psutil.net_if_addrs().get(iface, []):
        if a.family == socket.AF_INET:
            return a.address
    return socket.gethostname()


def _process_groups(rv: Rendezvous, backend: str, timeout: datetime.timedelta, torchrun: bool, transport: str):
    """The default group over the rendezvous store, and the halo group (None for one rank)."""
    if torchrun:
        dist.init_process_group(backend, init_method="env://", rank=rv.rank, world_size=rv.size, timeout=timeout)
    else:
        dist.init_process_group(backend, store=mpi_store(rv, timeout), rank=rv.rank, world_size=rv.size,
                                timeout=timeout)
    halo_group = dist.new_group(backend=backend, timeout=timeout) if rv.size > 1 else None
    if halo_group is not None and backend == "gloo":  # across hosts, a connection per direction (`transport`)
        hosts: list = [None] * rv.size
        dist.all_gather_object(hosts, (_host_key(), tuning.ENV.gloo_duplex))
        if len({on for _, on in hosts}) > 1:  # ranks would post different transfers to each other: a hang
            raise LaunchError("GNN_DIST_GLOO_DUPLEX differs between ranks: set it alike on every host")
        if len({key for key, _ in hosts}) > 1 and tuning.ENV.gloo_duplex:  # one host keeps gloo's own
            halo_transport.use_duplex(halo_group, backend, timeout)
    # MPI waits poll: with more ranks than cores on a host they would take cores from ranks that compute
    # (Cora at P=4 on 2 cores: 29.9 ms an epoch over MPI, 28.1 over gloo; at P=2, 10.8 against 16.3)
    if halo_group is not None and not torchrun and backend == "gloo" and transport != "gloo" and \
            (rv.sharing or rv.local_size) <= halo_transport.host_cores():
        halo_transport.use_mpi(halo_group)
    return halo_group
