"""How halo blocks cross between ranks: torch.distributed's all-to-all, or MPI's for CPU tensors.

Every halo all-to-all (exchange, relation aggregates, plan agreement, link
prediction's row fetches) goes through `all_to_all`, which takes the
arguments of `torch.distributed.all_to_all_single`. Under an `mpiexec`
launch on gloo (the CPU, or ranks sharing a GPU) with no more ranks than cores per host (MPI's waits poll, and
would take cores from ranks that compute), the launcher registers the halo
group here (`use_mpi`), and
CPU tensors then travel by MPI's `Ialltoallv` on a duplicate of
COMM_WORLD; everything else, CUDA tensors and torchrun launches included,
keeps torch.distributed (gloo, NCCL). So do large blocks (`agree_small`:
gloo's threads move them while the rank computes, MPI only once waited for)
and exchanges left in flight across other collectives (stale blocks),
because an MPI request moves only while its ranks are inside MPI. Where
ranks share a GPU (`gnn_dist.runtime.staging`), device tensors cross through
host copies, which then travel as CPU tensors do.

Why: on long sequences of small graphs an all-to-all's latency, not its
bytes, is the cost. Between two ranks on one 2-core box gloo's all-to-all
took 463 us with nothing else running, MPICH's 6.2 us (shared memory);
across hosts MPICH uses TCP. Gradient all-reduces and the few
control collectives stay on gloo: one per window or epoch, not per layer.

On gloo across hosts (`use_duplex`, which the launcher calls where ranks span several), the all-to-all is an
isend and an irecv per peer, and where a pair of ranks exchanges a megabyte or more
(`tuning.DUPLEX_MIN_PAIR_BYTES`) its two directions cross on connections of their own (two more groups, one
per direction). gloo's all-to-all and its isend/irecv pairs both carry both directions of a
pair of ranks on one connection, and there, measured on the lab's shaped links, a both-ways transfer took
2x the one-way time in most calls (13.5 MB each way at 100 Mbit/s: 2.23 s against 1.11 s); a group per
direction took 1.18 s (`sudo python scripts/gloo_duplex.py`). Smaller pairs stay on the halo group's one
connection (latency-bound: fewer threads to wake), and so do ranks on one host, as before (loopback showed
no consistent gain: `scripts/gloo_duplex.py --loopback`).

Blocks travel as bytes in a datatype of one row, so any dtype goes
(bfloat16 included) and counts stay rows, far below MPI's 2^31 limit.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from gnn_dist.runtime import staging, tuning
from gnn_dist.runtime.cgroups import usable_cpus

_COMMS: dict = {}  # torch process group -> MPI communicator carrying its CPU all-to-alls
_DUPLEX: dict = {}  # torch process group -> (group carrying blocks to higher ranks, group carrying them lower)
_ROW_TYPES: dict = {}  # row bytes -> committed MPI datatype


def host_cores() -> float:
    """Cores per host for the launcher's rule (MPI only where ranks do not outnumber them): the CPUs this
    process may use (`cgroups.usable_cpus`: a 0.45-core quota is less than one rank's polling needs);
    GNN_DIST_HOST_CORES overrides the count, so a 2-core box can take the transport a 16-core one would (tests)."""
    return tuning.ENV.host_cores or usable_cpus()


class MPIWork:
    """An MPI request behind the interface of torch's Work (`wait`), holding its buffers until done."""

    def __init__(self, request, keep: tuple):
        self.request, self.keep = request, keep

    def wait(self, timeout=None) -> bool:
        if self.request is not None:
            self.request.Wait()
            self.request = self.keep = None
        return True

    def is_completed(self) -> bool:
        return self.request is None or bool(self.request.Test())


def use_mpi(group) -> None:
    """Carry `group`'s CPU all-to-alls over MPI (ranks in COMM_WORLD order, as the launcher assigns them)."""
    from mpi4py import MPI

    _COMMS[group] = MPI.COMM_WORLD.Dup()


def use_duplex(group, backend: str, timeout) -> None:
    """Carry `group`'s gloo all-to-alls of CPU tensors on a connection per direction (see the module); the
    launcher does where ranks span more than one host.
    Collective: every rank of the world calls it, in the same place (the launcher, at start); `group` must
    span the world in rank order, as the launcher's halo group does."""
    _DUPLEX[group] = (dist.new_group(backend=backend, timeout=timeout), dist.new_group(backend=backend, timeout=timeout))


class Requests:
    """Point-to-point requests behind the interface of torch's Work (`wait`), holding their buffers until done."""

    def __init__(self, requests: list, keep: tuple):
        self.requests, self.keep = requests, keep

    def wait(self, timeout=None) -> bool:
        for r in self.requests:
            r.wait()
        self.requests, self.keep = [], ()
        return True

    def is_completed(self) -> bool:
        return all(r.is_completed() for r in self.requests)


def release(group) -> None:
    _DUPLEX.pop(group, None)
    comm = _COMMS.pop(group, None)
    if comm is not None:
        comm.Free()


def over_mpi(group) -> bool:
    return group in _COMMS


def over_duplex(group) -> bool:
    """Whether `group`'s gloo all-to-alls may take a connection per direction (`use_duplex`: across hosts)."""
    return group in _DUPLEX


def all_to_all(output: torch.Tensor, input: torch.Tensor, output_split_sizes: list[int] | None = None,
               input_split_sizes: list[int] | None = None, group=None, async_op: bool = False, mpi: bool = False):
    """`torch.distributed.all_to_all_single`; over MPI if `mpi`, the group is registered and tensors are on CPU.

    Callers pass `mpi` the same on every rank, and only for an all-to-all they wait for before any other
    collective: an MPI request moves only while its ranks are inside MPI, so one rank waiting on it
    while its peer blocks in a gloo all-reduce would deadlock (stale blocks, waited an epoch later,
    stay on torch.distributed, whose own threads move them).

    Where staging is on (ranks sharing a GPU, `gnn_dist.runtime.staging`), device tensors cross through
    host copies, and those travel as CPU tensors do (small plans over MPI).
    """
    if staging.staged(input, output):
        return staging.all_to_all(lambda o, i: _direct(o, i, output_split_sizes, input_split_sizes, group, True, mpi),
                                  output, input, async_op)
    return _direct(output, input, output_split_sizes, input_split_sizes, group, async_op, mpi)


def _direct(output: torch.Tensor, input: torch.Tensor, output_split_sizes, input_split_sizes, group, async_op: bool,
            mpi: bool):
    comm = _COMMS.get(group) if mpi else None
    on_cpu = input.device.type == "cpu" and output.device.type == "cpu" and output.is_contiguous()
    if on_cpu and comm is None and group in _DUPLEX:
        work = _duplex(group, _DUPLEX[group], output, input, output_split_sizes, input_split_sizes)
    elif comm is None or not on_cpu:
        return dist.all_to_all_single(output, input, output_split_sizes, input_split_sizes, group=group,
                                      async_op=async_op)
    else:
        work = _ialltoallv(comm, output, input, output_split_sizes, input_split_sizes)
    if not async_op:
        work.wait()
        return None
    return work


def is_mpi(work) -> bool:
    """Whether an all-to-all that `all_to_all` started travels over MPI (what the logs count as mpi_calls)."""
    return isinstance(work, MPIWork)


def agree_small(group, rows: int) -> bool:
    """Whether a plan of at most `rows` rows per all-to-all on this rank should travel over MPI: the same
    answer on every rank (one all-reduce). Small blocks are latency-bound, where MPI wins 75x; large ones
    are bandwidth-bound, and there gloo's threads move data while the rank computes (overlap), where an
    MPI request would move only once waited for (100k-node GCN at P=2: 0.314 s an epoch on gloo,
    0.359 s on MPI; `GNN_DIST_MPI_MAX_ROWS=1000000000 scripts/bench_train.py --transports gloo,auto`)."""
    if group not in _COMMS:
        return False
    t = torch.tensor([rows], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return int(t[0]) <= tuning.ENV.mpi_max_rows


def _ialltoallv(comm, output: torch.Tensor, input: torch.Tensor, out_splits, in_splits) -> MPIWork:
    p = comm.Get_size()
    send = input.contiguous()
    row = send.element_size() * math.prod(send.shape[1:])
    in_splits = list(in_splits) if in_splits is not None else [send.shape[0] // p] * p
    out_splits = list(out_splits) if out_splits is not None else [output.shape[0] // p] * p
    if row == 0 or (not any(in_splits) and not any(out_splits)):
        return MPIWork(None, ())
    dtype = _row_type(row)
    send_bytes = send.reshape(-1).view(torch.uint8).numpy()
    recv_bytes = output.reshape(-1).view(torch.uint8).numpy()  # output is ours, contiguous: a view into it
    sdispl, rdispl = _offsets(in_splits), _offsets(out_splits)
    request = comm.Ialltoallv([send_bytes, (in_splits, sdispl), dtype], [recv_bytes, (out_splits, rdispl), dtype])
    return MPIWork(request, (send, output, send_bytes, recv_bytes))


def _duplex(group, groups: tuple, output: torch.Tensor, input: torch.Tensor, out_splits, in_splits) -> Requests:
    """The all-to-all as one isend and one irecv per peer with rows; the own block is copied. A pair whose
    larger direction reaches `tuning.DUPLEX_MIN_PAIR_BYTES` sends blocks to the higher rank on groups[0] and
    to the lower on groups[1], a connection per direction; a smaller pair stays on `group`'s one connection
    (a wait across groups costs milliseconds). Both ends of a pair know both its blocks, so they choose
    alike. Every rank posts its peers in the same order (offset 1, 2, ...): gloo matches a pair's messages
    in order."""
    me, p = dist.get_rank(), dist.get_world_size()
    send = input.contiguous()
    in_splits = list(in_splits) if in_splits is not None else [send.shape[0] // p] * p
    out_splits = list(out_splits) if out_splits is not None else [output.shape[0] // p] * p
    sends = [c.reshape(-1).view(torch.uint8) for c in torch.split(send, in_splits)]
    recvs = [c.reshape(-1).view(torch.uint8) for c in torch.split(output, out_splits)]
    recvs[me].copy_(sends[me])

    def way(peer: int, to_peer: bool):
        if max(sends[peer].numel(), recvs[peer].numel()) < tuning.DUPLEX_MIN_PAIR_BYTES:
            return group
        return groups[0] if (peer > me) == to_peer else groups[1]

    requests = []
    for k in range(1, p):
        to, frm = (me + k) % p, (me - k) % p
        if sends[to].numel():
            requests.append(dist.isend(sends[to], to, group=way(to, True)))
        if recvs[frm].numel():
            requests.append(dist.irecv(recvs[frm], frm, group=way(frm, False)))
    return Requests(requests, (send, output))


def _offsets(splits: list[int]) -> list[int]:
    out, total = [], 0
    for s in splits:
        out.append(total)
        total += s
    return out


def _row_type(row_bytes: int):
    if row_bytes not in _ROW_TYPES:
        from mpi4py import MPI

        _ROW_TYPES[row_bytes] = MPI.BYTE.Create_contiguous(row_bytes).Commit()
    return _ROW_TYPES[row_bytes]
