"""Transfers in flight and at hand, and what each channel counts of them over an epoch.

`Pending` is an all-to-all not yet waited for; `Ready` a block already held
(stale or cached) behind the same interface, so a layer never knows which.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


@dataclass
class ChannelStats:
    """Per channel, accumulated over one epoch and reset when logged."""

    bytes_per_peer: list = field(default_factory=list)
    rows_per_peer: list = field(default_factory=list)
    wait_s: float = 0.0
    calls: int = 0
    qvar: float | torch.Tensor = 0.0  # expected quantisation variance summed over elements sent (a device tensor)
    elements: int = 0
    mpi_calls: int = 0  # all-to-alls that travelled over MPI (gnn_dist.runtime.transport), the rest over torch's
    recv_bytes: int = 0  # what came in, all peers together (bytes_per_peer is what went out)
    overlap_s: float = 0.0  # seconds from each start to its wait: the rank's work while the rows travelled

    def add(self, nbytes: list[int], rows: list[int], over_mpi: bool = False, recv_bytes: int = 0) -> None:
        self.recv_bytes += int(recv_bytes)
        if not self.bytes_per_peer:
            self.bytes_per_peer, self.rows_per_peer = [0] * len(nbytes), [0] * len(rows)
        for i, (b, r) in enumerate(zip(nbytes, rows)):
            self.bytes_per_peer[i] += b
            self.rows_per_peer[i] += r
        self.calls += 1
        self.mpi_calls += bool(over_mpi)

    def reset(self) -> dict:
        if isinstance(self.qvar, torch.Tensor) and self.qvar.is_cuda:  # summed on the exchange's side stream:
            torch.cuda.synchronize(self.qvar.device)  # read here, on another, only once it is written
        out = {"bytes": self.bytes_per_peer, "rows": self.rows_per_peer, "wait_s": round(self.wait_s, 6),
               "calls": self.calls, "mpi_calls": self.mpi_calls, "qvar": float(self.qvar) / max(self.elements, 1),
               "recv_bytes": self.recv_bytes, "overlap_s": round(self.overlap_s, 6)}
        self.__init__()
        return out


def add_per_peer(target: torch.Tensor, index: torch.Tensor, rows: torch.Tensor, splits: list[int]) -> torch.Tensor:
    """target[index] += rows, one peer's block at a time, in peer order.

    Within a peer's block no index repeats (a row goes to a peer once), so each
    index_add_ touches a target row at most once, and rows received from several
    peers are summed in peer order. One index_add_ over all blocks would sum
    them by atomics on CUDA, in an order that varies from run to run; on the
    CPU it adds in index order, which is this order, so the CPU's bits are the same.
    """
    for idx, block in zip(torch.split(index, splits), torch.split(rows, splits)):
        if idx.numel():
            target.index_add_(0, idx, block.to(target.dtype))
    return target


class Pending:
    """An exchange in flight; `wait()` returns the received rows, decoded (once; later calls reuse them).

    With a CUDA `stream`, waiting and decoding are queued on that stream and the
    caller's stream then waits for it; the host does not block (`wait_s` then
    counts host time only, near zero). `add_into` sums the received rows into
    a target instead, peer by peer (`add_per_peer`), decoding straight into it
    where the codec allows (`accumulate`), on the side stream where there is one.
    """

    def __init__(self, work, finish, stats: ChannelStats, stream=None, accumulate=None):
        self.work, self.finish, self.stats, self.result, self.stream = work, finish, stats, None, stream
        self.accumulate = accumulate  # (target, index) -> target: the received rows summed in, peer by peer
        self.started = time.perf_counter()  # what the rank does until `wait` overlaps the transfer (`overlap_s`)

    def wait(self) -> torch.Tensor:
        if self.result is None:
            if self.stream is None:
                self._transfer()
                self.result = self.finish()
            else:
                caller = torch.cuda.current_stream(self.stream.device)
                with torch.cuda.stream(self.stream):
                    self._transfer()
                    result = self.finish()
                caller.wait_stream(self.stream)
                result.record_stream(caller)  # allocated on the side stream, used on the caller's
                self.result = result
        return self.result

    def add_into(self, target: torch.Tensor, index: torch.Tensor, splits: list[int]) -> torch.Tensor:
        """target[index] += received rows; `splits`: the rows from each peer, in peer order."""
        if self.result is not None or self.accumulate is None:
            return add_per_peer(target, index, self.wait(), splits)
        if self.stream is None:
            self._transfer()
            return self.accumulate(target, index)
        caller = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(caller)  # the target's own writes come first
        with torch.cuda.stream(self.stream):
            self._transfer()
            self.accumulate(target, index)
        target.record_stream(self.stream)  # made on the caller's stream, written on the side stream
        index.record_stream(self.stream)
        caller.wait_stream(self.stream)
        return target

    def _transfer(self) -> None:
        if self.work is not None:
            t = time.perf_counter()
            self.stats.overlap_s += t - self.started
            self.work.wait()
            self.work = None
            self.stats.wait_s += time.perf_counter() - t


class Ready:
    """A block already at hand (stale or cached), with the same interface as Pending."""

    def __init__(self, value: torch.Tensor):
        self.result = value

    def wait(self) -> torch.Tensor:
        return self.result

    def add_into(self, target: torch.Tensor, index: torch.Tensor, splits: list[int]) -> torch.Tensor:
        return add_per_peer(target, index, self.result, splits)
