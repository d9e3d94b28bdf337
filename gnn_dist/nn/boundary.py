"""Hidden layers' boundary rows sent before dropout, where the exchange reuses rows (stale or skipped).

A hidden layer's input is dropout(ReLU(h)); dropout redraws every element's
mask each step, so the rows a layer sends move by about their own size from
one step to the next even when h barely moves. A block reused from an
earlier step (`--staleness`) or a row not re-sent (`--skip-threshold`) then
carries another step's mask: the noise, not the drift, sets the error, and a
change test cannot tell the two apart (docs/benchmarks.md, "Time to
accuracy"). So where the exchange reuses rows, ReLU(h)'s rows cross the wire
before dropout, and every rank drops its copy of a row with the mask keyed by
(step, layer, global node id, column) (`keyed_dropout`), as the input
features' cache does: what each rank computes is what it would be had the
dropped rows been sent, and what is reused is only as old as h's drift.
Exact exchanges keep dropping before sending (`relu_dropout`): no extra pass.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dropout import input_step_key, keyed_dropout, relu_dropout
from gnn_dist.nn.message_passing import exchange_channel
from gnn_dist.runtime import streams
from gnn_dist.runtime.halo_fetch import fetch_halo


class KeyedDropout(torch.autograd.Function):
    """`keyed_dropout` with its gradient: dropout is linear, so backward applies the same mask and scale."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, ids: torch.Tensor, p: float, key: int) -> torch.Tensor:
        ctx.ids, ctx.p, ctx.key = ids, p, key
        return keyed_dropout(x.detach(), ids, p, key)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return keyed_dropout(grad.contiguous(), ctx.ids, ctx.p, ctx.key), None, None, None


def hidden_dropout(h: torch.Tensor, graph: LocalGraph, p: float, training: bool, layer: int,
                   owner: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dropout(ReLU(h)) as layer `layer`'s input, its halo or None).

    Where the exchange reuses boundary rows (see the module), ReLU(h)'s halo is fetched on `owner`'s
    channel and dropped here by node id; the caller runs the layer with it `provided`
    (`gnn_dist.runtime.halo_fetch`), so the layer finds it held. The layer must aggregate its input (not
    x W) for this to save anything: the caller decides.
    """
    key = input_step_key()
    ex = graph.exchange
    reuses = getattr(getattr(ex, "config", None), "reuses_rows", False)  # (stand-ins without a config: no)
    if not (training and p > 0.0 and key is not None and reuses and torch.is_grad_enabled()):
        return relu_dropout(h, p, training), None
    r = F.relu(h)
    halo = fetch_halo(r, ex, exchange_channel(graph, owner))
    ids, n = graph.global_id_tensor(), graph.num_inner
    k = streams.derive(key, layer)
    return KeyedDropout.apply(r, ids[:n], p, k), KeyedDropout.apply(halo, ids[n:], p, k)
