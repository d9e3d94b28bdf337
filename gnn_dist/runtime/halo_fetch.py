"""One layer call's fetch of a tensor's halo rows: the sequence every caller shares.

held (the exchange already holds x's halo: nothing is sent) -> start (send the rows peers need) ->
the caller's overlapped work (central rows) -> wait. `halo()` waits with autograd (`HaloWait`: backward
sends the halo rows' gradients home on the same channel); `rows()` waits without, for an autograd
Function that sends gradients itself (`gnn_dist.nn.message_passing.HaloSpMM`); `settle()` waits now
and keeps the rows for a later `halo()`, so that an exchange without overlap builds the autograd graph
an overlapped one builds, and sums in the same order.

What a caller names the channel by, and when, stays the caller's: the names are checkpoint and log keys.
"""
from __future__ import annotations

import contextlib

import torch

from gnn_dist.runtime.transfers import Ready


class HaloFetch:
    """x's halo for one call: `held` (a tensor the exchange held, or None), else an exchange in flight."""

    def __init__(self, exchange, x: torch.Tensor, channel: str | None):
        self.exchange, self.x, self.channel = exchange, x, channel
        self.held = exchange.held(x) if exchange is not None else None
        self.pending = exchange.start(x, channel) if exchange is not None and self.held is None else None

    def settle(self) -> None:
        """Wait now, outside autograd; `halo()` later still adds the autograd edge (where the caller wants it)."""
        if self.pending is not None and not isinstance(self.pending, Ready):
            self.pending = Ready(self.pending.wait())

    def rows(self) -> torch.Tensor:
        """The halo rows, waited for outside autograd."""
        return self.held if self.held is not None else self.pending.wait()

    def halo(self) -> torch.Tensor:
        """The halo rows, autograd-tracked: their gradients go back to the owners in backward."""
        if self.held is not None:
            return self.held
        return HaloWait.apply(self.x, self.pending, self.exchange, self.channel)


@contextlib.contextmanager
def provided(exchange, x: torch.Tensor, halo: torch.Tensor | None):
    """Within the block, `exchange` holds x's halo (fetched already: layers that aggregate x send nothing);
    after it, not: a persistent x (an embedding table) must not meet this step's halo in the next, and the
    halo must not outlive the layers that read it (it would stand in backward's peak where x is saved)."""
    if exchange is None or halo is None:
        yield
        return
    exchange.provide(x, halo)
    try:
        yield
    finally:
        exchange.forget(x)


def fetch_halo(x: torch.Tensor, exchange, channel: str | None) -> torch.Tensor:
    """x's halo rows now, autograd-tracked (a fetch with nothing to overlap)."""
    return HaloFetch(exchange, x, channel).halo()


class HaloWait(torch.autograd.Function):
    """Autograd edge for an exchange started outside autograd: forward waits, backward sends gradients home."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, pending, exchange, channel: str | None = None) -> torch.Tensor:
        ctx.exchange, ctx.num_inner, ctx.channel = exchange, x.shape[0], channel
        return pending.wait()

    @staticmethod
    def backward(ctx, grad_halo: torch.Tensor):
        ex = ctx.exchange
        pending = ex.start_backward(grad_halo, ctx.channel)
        grad = torch.zeros(ctx.num_inner, *grad_halo.shape[1:], dtype=grad_halo.dtype, device=grad_halo.device)
        return ex.scatter_back(grad, pending), None, None, None
