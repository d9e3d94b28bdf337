"""From an MPI (or torchrun) launch to a ready torch.distributed context (docs/design.md §9).

MPI learns rank and size and agrees on a rendezvous; tensors travel over
torch.distributed (gloo on CPU, NCCL on GPU, gloo through host copies where ranks share a GPU:
`gnn_dist.runtime.placement`), except CPU halo all-to-alls under
mpiexec, which MPI carries where blocks are small (`gnn_dist.runtime.transport`: 75x less latency). Halo traffic gets
its own process group so a background exchange never interleaves with the
gradient all-reduce. A heartbeat watchdog turns a lost rank into a prompt,
named failure on every survivor instead of a hang.
"""
from __future__ import annotations

import atexit
import datetime
import fcntl
import gc
import os
import socket
import struct
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from gnn_dist.errors import LaunchError
from gnn_dist.runtime import placement
from gnn_dist.runtime import transport as halo_transport
from gnn_dist.runtime.malloc import keep_freed_memory

# Objects in reference cycles (exchange <-> policy, context <-> its failure hooks) keep process groups alive
# until the interpreter's final collection, where destroying gloo's C++ objects can abort the process
# ("terminate called without an active exception"): collect them at exit, while the interpreter is whole.
atexit.register(gc.collect)
_OPEN: list["DistContext"] = []  # contexts not yet closed; closed at exit (registered after gc.collect: runs first)
FAILED_KEY = "gnn_dist/failed"  # set in the store by a rank that fails on its own (a user error): peers stop too


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    local_size: int
    device: torch.device
    backend: str
    halo_group: object = None
    watchdog: "Watchdog | None" = None
    on_fail: list = field(default_factory=list)  # callables(message) run before a failing rank exits
    closed: bool = False
    _failing: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __enter__(self) -> "DistContext":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close(clean=exc_type is None)
        return False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def fail(self, message: str | None, code: int = 1, grace_s: float = 1.0, publish: bool = False) -> None:
        """Report on stderr with the rank prefix and leave without waiting on peers.

        `publish` tells every peer's watchdog that this rank failed on its own (an
        error in user code), so peers blocked in a collective leave at once and
        quietly; `message` None leaves quietly (such a peer).

        The short grace lets the launcher forward this line (and the other
        survivors, who notice within the same heartbeat, theirs) before the
        first exit makes mpiexec kill the rest. The first failure wins: a
        second thread failing meanwhile (the main thread's broken collective
        while the watchdog names the dead peer) waits for that exit instead of
        reporting a second, vaguer reason.
        """
        if not self._failing.acquire(blocking=False):
            time.sleep(grace_s + 10.0)
            os._exit(code)
        if publish and self.watchdog is not None:
            # no heartbeat after this: rank 0 leaves as soon as it reads the key, and a store call to a
            # closed store makes torch print a C++ backtrace beside our one line
            self.watchdog.stop()
            try:
                self.watchdog.store.set(FAILED_KEY, f"{self.rank}\t{message}")
            except Exception:
                pass
            if self.rank == 0:  # the store lives here: stay until every peer's watchdog has read the key
                grace_s = max(grace_s, 2.5 * self.watchdog.period)
        for hook in self.on_fail if message is not None else ():  # e.g. the trainer notes it in its JSONL log
            try:
                hook(message)
            except Exception:
                pass
        try:
            if message is not None:
                sys.stderr.write(f"[rank {self.rank}] gnn-dist: error: {message}\n")
            sys.stderr.flush()
            sys.stdout.flush()
        except (OSError, ValueError):  # the launcher may already have closed our stderr
            pass
        time.sleep(grace_s)
        os._exit(code)

    def close(self, clean: bool = True) -> None:
        """Leave torch.distributed in an order that cannot abort; called at exit if not before.

        The watchdog stops first (a store call in flight while the store goes
        away aborts), then all ranks meet, so rank 0, which hosts the store,
        leaves last; then the process groups go, and with them gloo's threads,
        while the interpreter is whole. `clean=False` (leaving on an error) waits
        at most 10 s for peers that may never come.
        """
        if self.closed:
            return
        self.closed = True
        if self in _OPEN:
            _OPEN.remove(self)
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.halo_group is not None:
            from gnn_dist.runtime import transport

            transport.release(self.halo_group)
        if self.distributed:
            try:
                if self.backend == "gloo" and self.world_size > 1:
                    wait = datetime.timedelta(seconds=10) if not clean else None
                    dist.monitored_barrier(timeout=wait, wait_all_ranks=True)
                elif clean:
                    dist.barrier()
            except Exception:
                pass
            finally:
                dist.destroy_process_group()
        gc.collect()


def close_all(clean: bool = True) -> None:
    """Close every context still open (the launcher on its way out; also run at interpreter exit)."""
    for ctx in list(_OPEN):
        ctx.close(clean=clean)


def _leave_on_uncaught(hook):
    """sys.excepthook for a rank with a context: the traceback as usual, then tell the peers and leave.

    Without this, a rank whose script raised would wait at exit for peers that
    wait in a collective for it.
    """
    def excepthook(exc_type, exc, tb):
        hook(exc_type, exc, tb)
        if _OPEN and not issubclass(exc_type, KeyboardInterrupt):  # (SystemExit never reaches an excepthook)
            _OPEN[-1].fail(f"{exc_type.__name__}: {exc}", code=1, grace_s=0.5, publish=True)
    return excepthook


TRANSPORT_ERRORS = ("third_party/gloo", "gloo/transport", "NCCL error", "Connection closed by peer",
                    "Connection reset by peer", "Socket Timeout")


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


def describe_user_error(exc: BaseException) -> str:
    """One line: the error and the innermost frame of user code (not torch's, not gnn-dist's) that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    pkg_dirs = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))
    user = [f for f in frames if not f.filename.startswith(pkg_dirs)]
    frame = (user or frames or [None])[-1]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    where = f" in {frame.filename}:{frame.lineno} ({frame.name})" if frame is not None else ""
    return f"{type(exc).__name__}{where}: {text} (--debug shows the traceback)"


def _interfaces() -> dict[str, str]:
    """IPv4 address of every interface that has one (name -> address)."""
    out = {}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
                out[name] = socket.inet_ntoa(packed[20:24])
            except OSError:
                continue
    finally:
        s.close()
    return out


def _iface_towards(addr: str) -> str | None:
    """The local interface the kernel would route to `addr` through."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((addr, 9))
        local = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    for name, ip in _interfaces().items():
        if ip == local:
            return name
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _mpi_rendezvous(master_addr: str | None, iface: str | None):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    ifaces = _interfaces()
    all_ifaces = comm.allgather(sorted(ifaces.items()))
    if rank == 0:
        if master_addr is None and iface:
            if iface not in ifaces:
                raise LaunchError(f"--iface {iface} has no IPv4 address on rank 0 (have: {', '.join(ifaces)})")
            master_addr = ifaces[iface]
        if master_addr is None:
            one_host = all(a == all_ifaces[0] for a in all_ifaces)
            master_addr = "127.0.0.1" if one_host else next(
                (ip for name, ip in sorted(ifaces.items()) if not ip.startswith("127.")), "127.0.0.1")
        payload = (master_addr, _free_port())
    else:
        payload = None
    master_addr, port = comm.bcast(payload, root=0)
    return rank, size, local_rank, local_size, master_addr, port


def init(backend: str | None = None, timeout_s: float = 120.0, iface: str | None = None,
         master_addr: str | None = None, expected_world: int | None = None,
         heartbeat_s: float = 1.0, dead_after_s: float = 10.0, transport: str = "auto") -> DistContext:
    """Start torch.distributed for this process; `expected_world` is checked before any network setup.

    `backend`: None (NCCL where each rank of a host has a GPU of its own, ranks sharing GPUs staged through
    host memory, the CPU and gloo without CUDA), "gloo" (the CPU), "nccl", or "staged" (GPUs, every
    collective through pinned host memory: nodes without GPUDirect); `gnn_dist.runtime.placement`.

    `transport`: how host halo all-to-alls travel (`gnn_dist.runtime.transport`): "auto" (small plans over
    MPI under an mpiexec launch on gloo, the CPU's or a shared GPU's, with no more ranks than cores per
    host; everything else over torch.distributed) or "gloo" (all of them).

    The context closes itself at interpreter exit (or use `with gd.init() as ctx:`); a rank whose
    script dies of an uncaught exception makes its peers leave too.
    """
    if transport not in ("auto", "gloo"):
        raise LaunchError(f"unknown transport '{transport}' (choose auto or gloo)")
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if torchrun:
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        init_method = "env://"
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    else:
        rank, size, local_rank, local_size, addr, port = _mpi_rendezvous(master_addr, iface)
        init_method = f"tcp://{addr}:{port}"
    if expected_world is not None and size != expected_world:
        raise LaunchError(f"launched with {size} ranks but the partition has {expected_world} parts "
                          f"(run mpiexec -n {expected_world})")
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(local_size, 1)))
    keep_freed_memory()
    gpus = torch.cuda.device_count() if backend != "gloo" and torch.cuda.is_available() else 0
    place = placement.choose(backend, local_rank, local_size, gpus, agree=placement.mpi_all if not torchrun else bool)
    backend, device = placement.apply(place, rank)
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        name = iface or ("lo" if addr.startswith("127.") else _iface_towards(addr))
        if name:
            os.environ["GLOO_SOCKET_IFNAME"] = name
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size, timeout=timeout)
    halo_group = dist.new_group(backend=backend, timeout=timeout) if size > 1 else None
    # MPI waits poll: with more ranks than cores on a host they would take cores from ranks that compute
    # (Cora at P=4 on 2 cores: 29.9 ms an epoch over MPI, 28.1 over gloo; at P=2, 10.8 against 16.3)
    if halo_group is not None and not torchrun and backend == "gloo" and transport != "gloo" and \
            local_size <= halo_transport.host_cores():
        halo_transport.use_mpi(halo_group)
    ctx = DistContext(rank, size, local_rank, local_size, device, backend, halo_group)
    if size > 1:
        ctx.watchdog = Watchdog(ctx, heartbeat_s, dead_after_s)
        ctx.watchdog.start()
    if not _OPEN and not getattr(sys.excepthook, "gnn_dist", False):
        sys.excepthook = _leave_on_uncaught(sys.excepthook)
        sys.excepthook.gnn_dist = True
    _OPEN.append(ctx)
    return ctx


atexit.register(close_all)


class Watchdog:
    """Heartbeats through the rendezvous store; a silent peer makes this rank exit naming it.

    Counters, not clocks, travel: each rank bumps its own and notes locally
    when each peer's last changed, so hosts need no synchronised time.
    """

    def __init__(self, ctx: DistContext, period_s: float, dead_after_s: float):
        self.ctx = ctx
        self.period = period_s
        self.dead_after = dead_after_s
        self.store = dist.distributed_c10d._get_default_store()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gnn-dist-watchdog", daemon=True)
        self.lost: int | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to finish and wait for it: a store call in flight during shutdown aborts the process."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.period * 5 + self.dead_after)

    def _run(self) -> None:
        n, me = self.ctx.world_size, self.ctx.rank
        beat = 0
        last_val = [None] * n
        last_change = [time.monotonic()] * n
        while not self._stop.is_set():
            beat += 1
            try:
                self.store.set(f"gnn_dist/hb/{me}", str(beat))
                if self.store.check([FAILED_KEY]):  # a peer failed on its own and said so: leave quietly
                    self.lost = int(self.store.get(FAILED_KEY).decode().split("\t")[0])
                    # rank 0 hosts the store: it leaves after the failing rank (1 s of grace), whose
                    # client would otherwise meet a closed store and make torch print a backtrace
                    self.ctx.fail(None, code=3, grace_s=0.2 if me != 0 else 2.0)
                for r in range(n):
                    if r == me:
                        continue
                    key = f"gnn_dist/hb/{r}"
                    val = self.store.get(key) if self.store.check([key]) else None
                    if val != last_val[r]:
                        last_val[r], last_change[r] = val, time.monotonic()
                    elif time.monotonic() - last_change[r] > self.dead_after:
                        self._lose(r, f"no heartbeat for {self.dead_after:.0f} s")
            except Exception:  # the store lives on rank 0's process: losing it means rank 0 is gone
                if self._stop.is_set():
                    return
                if me != 0:
                    self._lose(0, "rendezvous store on rank 0 unreachable")
                return
            self._stop.wait(self.period)

    def _lose(self, rank: int, why: str) -> None:
        self.lost = rank
        # rank 0 hosts the store: lingering a few heartbeats longer lets every survivor see the same dead
        # peer before the store goes and they would blame rank 0 instead
        grace = 1.0 + (3 * self.period if self.ctx.rank == 0 else 0.0)
        self.ctx.fail(f"rank {rank} lost ({why}); aborting", code=3, grace_s=grace)

    def blame(self, wait_s: float | None = None) -> int | None:
        """After a failed collective, give the watchdog time to name the dead peer (it exits the process)."""
        deadline = time.monotonic() + (wait_s if wait_s is not None else self.dead_after + 3 * self.period)
        while time.monotonic() < deadline and self.lost is None:
            time.sleep(0.1)
        return self.lost
