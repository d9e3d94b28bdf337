"""The few collectives a training loop needs: sums, broadcasts, and one bucket for all gradients.

Gradients travel in one flat bucket per step (one all-reduce, not one per
parameter), with any scalars the loop wants summed riding along at the end. Where ranks share a GPU,
sums and broadcasts of device tensors cross through host copies (`gnn_dist.runtime.staging`); object
collectives travel as host bytes on gloo anyway.

A *rank-local* parameter (`mark_rank_local`) holds only this rank's rows of a
global table, such as learnable node embeddings: its rows live with their
owner, like features, so it is neither broadcast nor all-reduced (its halo
gradients come back through the exchange). `gather_rows` assembles the whole
table on rank 0 for checkpoints and saved models.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from gnn_dist.runtime import staging
from gnn_dist.runtime.launch import DistContext


def all_sum(t: torch.Tensor, ctx: DistContext, op=dist.ReduceOp.SUM) -> torch.Tensor:
    t = t.to(ctx.device)
    if ctx.world_size > 1:
        staging.all_reduce(t, op=op)
    return t


def count_sum(n: int, ctx: DistContext, op=dist.ReduceOp.SUM) -> int:
    """A count (rows, bytes) summed over ranks, in int64: float32 would round above 2^24."""
    return int(all_sum(torch.tensor([int(n)], dtype=torch.int64), ctx, op=op)[0])


def broadcast(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    t = t.to(ctx.device)
    if ctx.world_size > 1:
        staging.broadcast(t, 0)
    return t


def mark_rank_local(p: torch.nn.Parameter, rows: torch.Tensor, num_rows: int) -> torch.nn.Parameter:
    """Declare `p` to hold rows `rows` (positions in a global table of `num_rows` rows) of this rank only."""
    p.rank_rows, p.num_rows = rows.to(torch.int64).cpu(), int(num_rows)
    return p


def is_rank_local(p: torch.Tensor) -> bool:
    return hasattr(p, "rank_rows")


def replicated(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters every rank holds whole (all but the rank-local ones)."""
    return [p for p in model.parameters() if not is_rank_local(p)]


def gather_rows(t: torch.Tensor, rows: torch.Tensor, num_rows: int, ctx: DistContext) -> torch.Tensor | None:
    """The global table whose rows `rows` this rank holds as `t`: on rank 0, in row order; None elsewhere."""
    mine = (rows.numpy(), t.detach().cpu())
    pieces = [None] * ctx.world_size if ctx.is_main else None
    if ctx.world_size > 1:
        dist.gather_object(mine, pieces, dst=0)
    else:
        pieces = [mine]
    if not ctx.is_main:
        return None
    full = t.new_zeros((num_rows,) + tuple(t.shape[1:]), device="cpu")
    for r, values in pieces:
        full[torch.from_numpy(r)] = values
    return full


def all_concat(t: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Every rank's rows of `t`, concatenated in rank order, on every rank (CPU)."""
    if ctx.world_size == 1:
        return t.detach().cpu()
    pieces = [None] * ctx.world_size
    dist.all_gather_object(pieces, t.detach().cpu())
    return torch.cat(pieces)


def sync_parameters(model: torch.nn.Module, ctx: DistContext) -> None:
    """Replicas start from rank 0's weights, whatever each rank's RNG did."""
    if ctx.world_size > 1:
        for p in replicated(model):
            broadcast(p.data, ctx)


def sum_gradients(model: torch.nn.Module, ctx: DistContext, extra: torch.Tensor) -> torch.Tensor:
    """Sum every replicated parameter's gradient over ranks in place; returns `extra` (1-D) summed as well."""
    params = replicated(model)
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    dtype = grads[0].dtype if grads else torch.float32
    bucket = all_sum(torch.cat(grads + [extra.detach().reshape(-1).to(dtype)]), ctx)
    offset = 0
    for p, g in zip(params, grads):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        p.grad.copy_(bucket[offset: offset + g.numel()].view_as(p))
        offset += g.numel()
    return bucket[offset:]
