"""Halo exchange (DESIGN sec. 4): one all_to_all_single per layer and direction.

Forward sends `x[send_idx]` to the parts that hold those rows as halo; the
receive buffer *is* the halo block because the partitioner ordered halo rows
in the owner's send order. Backward is the mirror: halo-row gradients go back
to their owners and are summed in at `send_idx`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from gnn_dist import codec


@dataclass
class ChannelStats:
    """Per-direction counters the trainer logs each epoch."""

    bytes_sent: int = 0
    wait_s: float = 0.0
    calls: int = 0

    def reset(self) -> dict:
        out = {"bytes_sent": self.bytes_sent, "wait_s": round(self.wait_s, 6), "calls": self.calls}
        self.bytes_sent, self.wait_s, self.calls = 0, 0.0, 0
        return out


class Pending:
    """An exchange in flight; `wait()` returns the received rows, decoded."""

    def __init__(self, work, out: torch.Tensor, stats: ChannelStats, shape_tail: tuple, codec_name: str = "fp32",
                 width: int = 0, dtype: torch.dtype = torch.float32):
        self.work, self.out, self.stats, self.shape_tail = work, out, stats, shape_tail
        self.codec, self.width, self.dtype = codec_name, width, dtype

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            t = time.perf_counter()
            self.work.wait()
            self.stats.wait_s += time.perf_counter() - t
        out = self.out
        if self.codec != "fp32":
            out = codec.decode(codec.from_rows(out, self.codec, self.width), self.dtype)
        return out.view(out.shape[0], *self.shape_tail)


@dataclass
class HaloExchange:
    """Send/receive plan of one rank; the same plan serves every layer."""

    send_idx: torch.Tensor  # int64 local ids of inner rows sent, grouped by destination
    send_counts: list[int]
    recv_counts: list[int]
    group: object = None
    codec: str = "fp32"  # wire format of training messages; evaluation always sends fp32
    exact: bool = False  # set by the trainer while evaluating
    forward_stats: ChannelStats = field(default_factory=ChannelStats)
    backward_stats: ChannelStats = field(default_factory=ChannelStats)

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts)

    def _a2a(self, rows: torch.Tensor, out_rows: int, out_splits: list[int], in_splits: list[int],
             stats: ChannelStats) -> Pending:
        tail = tuple(rows.shape[1:])
        flat = rows.reshape(rows.shape[0], -1).contiguous()
        name = "fp32" if self.exact or flat.dtype != torch.float32 else self.codec
        width, dtype = flat.shape[1], flat.dtype
        if name != "fp32":
            flat = codec.to_rows(codec.encode(flat, name))
        out = torch.empty(out_rows, flat.shape[1], dtype=flat.dtype, device=flat.device)
        work = dist.all_to_all_single(out, flat, out_splits, in_splits, group=self.group, async_op=True)
        stats.bytes_sent += flat.numel() * flat.element_size()
        stats.calls += 1
        return Pending(work, out, stats, tail, name, width, dtype)

    def start(self, x: torch.Tensor) -> Pending:
        """Begin sending the rows peers need; x holds this rank's inner rows."""
        return self._a2a(x.detach()[self.send_idx], self.num_halo, self.recv_counts, self.send_counts,
                         self.forward_stats)

    def start_backward(self, halo_grad: torch.Tensor) -> Pending:
        """Begin returning halo-row gradients to their owners."""
        return self._a2a(halo_grad, int(self.send_idx.shape[0]), self.send_counts, self.recv_counts,
                         self.backward_stats)

    def scatter_back(self, grad_inner: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
        """Sum gradients that peers computed for our rows into our inner-row gradient."""
        return grad_inner.index_add_(0, self.send_idx, received.to(grad_inner.dtype))


class HaloWait(torch.autograd.Function):
    """Autograd edge for an exchange started outside autograd: forward waits, backward sends gradients home."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, pending: Pending, exchange: HaloExchange) -> torch.Tensor:
        ctx.exchange, ctx.num_inner = exchange, x.shape[0]
        return pending.wait()

    @staticmethod
    def backward(ctx, grad_halo: torch.Tensor):
        ex = ctx.exchange
        received = ex.start_backward(grad_halo).wait()
        grad = torch.zeros(ctx.num_inner, *grad_halo.shape[1:], dtype=grad_halo.dtype, device=grad_halo.device)
        return ex.scatter_back(grad, received), None, None
