"""Where ranks meet: rank 0's address, the store that listens there, and the interface gloo binds to.

Under mpiexec, rank 0 picks the rendezvous address (loopback when every rank
is on its host, else `--iface`'s address or its first non-loopback one), binds
a listening socket to that address, not to every interface, and hands it to
torch's TCPStore as `master_listen_fd`; the port it got travels to the other
ranks over MPI. torch's own `TCPStore("127.0.0.1", ...)` listens on `*:PORT`
(measured with torch 2.13), which would offer the store to every network the
host is on. Under torchrun the store is torchrun's (`env://`).
"""
from __future__ import annotations

import datetime
import fcntl
import os
import socket
import struct
from dataclasses import dataclass

import torch.distributed as dist

from gnn_dist.errors import LaunchError
from gnn_dist.runtime import cgroups, compat


@dataclass
class Rendezvous:
    rank: int
    size: int
    local_rank: int
    local_size: int
    addr: str  # the store's address (rank 0's), as every rank dials it
    port: int
    listener: socket.socket | None = None  # rank 0 under mpiexec: bound and listening, handed to the store
    sharing: int = 0  # ranks on this host whose CPU affinity overlaps this one's, itself included (0: unknown)
    in_group: int = 0  # ranks on this host under the cgroup that sets this one's CPU quota, itself included


def ranks_sharing(mine: list[int], host: list[list[int]]) -> int:
    """How many of a host's ranks (their affinity CPU lists, `host`) may run on a CPU this rank may (`mine`).
    A launcher that binds each rank to cores of its own (srun --cpus-per-task, mpiexec --bind-to) has
    already divided the host: its ranks' threads must not divide it again; unbound ranks share it all."""
    own = set(mine)
    return sum(1 for cpus in host if not own or not cpus or own & set(cpus)) or 1


def interfaces() -> dict[str, str]:
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


def iface_towards(addr: str) -> str | None:
    """The local interface the kernel would route to `addr` through."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((addr, 9))
        local = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    for name, ip in interfaces().items():
        if ip == local:
            return name
    return None


def gloo_interface(iface: str | None, addr: str) -> str | None:
    """The interface gloo should bind to: --iface, loopback for a loopback rendezvous, else the route to rank 0."""
    return iface or ("lo" if addr.startswith("127.") else iface_towards(addr))


def _listen(addr: str) -> socket.socket:
    """A socket bound to `addr` on a port the kernel picks, listening (what the store will accept on)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((socket.gethostbyname(addr), 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def mpi_rendezvous(master_addr: str | None, iface: str | None) -> Rendezvous:
    """Rank and size from MPI; rank 0 chooses the address, listens there, and tells everyone the port."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    group = cgroups.quota_group()
    host = local.allgather((mine, group))
    sharing, in_group = ranks_sharing(mine, [cpus for cpus, _ in host]), sum(g == group for _, g in host)
    local.Free()
    ifaces = interfaces()
    all_ifaces = comm.allgather(sorted(ifaces.items()))
    listener = None
    if rank == 0:
        try:
            if master_addr is None and iface:
                if iface not in ifaces:
                    raise LaunchError(f"--iface {iface} has no IPv4 address on rank 0 (have: {', '.join(ifaces)})")
                master_addr = ifaces[iface]
            if master_addr is None:
                one_host = all(a == all_ifaces[0] for a in all_ifaces)
                master_addr = "127.0.0.1" if one_host else next(
                    (ip for name, ip in sorted(ifaces.items()) if not ip.startswith("127.")), "127.0.0.1")
            try:
                listener = _listen(master_addr)
            except OSError as e:
                raise LaunchError(f"rank 0 cannot listen on {master_addr}: {e.strerror or e}") from None
            payload = (master_addr, listener.getsockname()[1], None)
        except LaunchError as e:  # every rank raises it, not rank 0 alone while the others wait here
            payload = (None, None, str(e))
    else:
        payload = None
    master_addr, port, error = comm.bcast(payload, root=0)
    if error is not None:
        raise LaunchError(error)
    return Rendezvous(rank, size, local_rank, local_size, master_addr, port, listener, sharing, in_group)


def mpi_store(rv: Rendezvous, timeout: datetime.timedelta) -> dist.TCPStore:
    """Rank 0 serves the store on the socket it bound (the store takes the descriptor over: libuv's from torch
    2.8, the classic one before); the others dial it."""
    if rv.listener is not None:
        fd = rv.listener.detach()
        rv.listener = None
        return dist.TCPStore(rv.addr, rv.port, rv.size, True, timeout, wait_for_workers=False,
                             master_listen_fd=fd, use_libuv=compat.STORE_LIBUV_TAKES_FD)
    return dist.TCPStore(rv.addr, rv.port, rv.size, False, timeout)
