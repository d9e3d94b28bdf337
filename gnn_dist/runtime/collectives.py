"""The few collectives a training loop needs: sums, broadcasts, and one bucket for all gradients.

Gradients travel in one flat bucket per step (one all-reduce, not one per
parameter), with any scalars the loop wants summed riding along at the end.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from gnn_dist.runtime.launch import DistContext


def all_sum(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    t = t.to(ctx.device)
    if ctx.world_size > 1:
        dist.all_reduce(t)
    return t


def broadcast(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    t = t.to(ctx.device)
    if ctx.world_size > 1:
        dist.broadcast(t, 0)
    return t


def sync_parameters(model: torch.nn.Module, ctx: DistContext) -> None:
    """Replicas start from rank 0's weights, whatever each rank's RNG did."""
    if ctx.world_size > 1:
        for p in model.parameters():
            broadcast(p.data, ctx)


def sum_gradients(model: torch.nn.Module, ctx: DistContext, extra: torch.Tensor) -> torch.Tensor:
    """Sum every parameter's gradient over ranks in place; returns `extra` (1-D) summed as well."""
    params = list(model.parameters())
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    bucket = all_sum(torch.cat(grads + [extra.detach().reshape(-1).to(grads[0].dtype)]), ctx)
    offset = 0
    for p, g in zip(params, grads):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(bucket[offset: offset + g.numel()].view_as(p))
        offset += g.numel()
    return bucket[offset:]
