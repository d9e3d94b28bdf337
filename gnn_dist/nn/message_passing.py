"""The one extension point for layers: message / aggregate / update, like PyG's MessagePassing.

A layer never sees ranks. `propagate` asks the graph it is given whether halo
rows must be fetched; if so it starts the exchange, aggregates the central
rows (which read inner rows only) while messages are in flight, waits, and
aggregates the marginal rows. Layers that keep the default `message` (x_j,
optionally weighted) take the fast path: one sparse CSR product per block,
with overlap in backward too.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from gnn_dist.exchange import HaloWait
from gnn_dist.graph import LocalGraph, SplitOperator, spmm


class HaloSpMM(torch.autograd.Function):
    """out = A @ [x; halo(x)], everything but the halo columns computed while the exchange is in flight."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, op: SplitOperator, graph: LocalGraph) -> torch.Tensor:
        ctx.op, ctx.graph = op, graph
        ex = graph.exchange
        pending = ex.start(x) if ex is not None else None
        if pending is not None and not graph.overlap:
            halo = pending.wait()
        out_c = spmm(op.central, x)
        out_m = spmm(op.local, x)
        if pending is not None:
            if graph.overlap:
                halo = pending.wait()
            out_m = out_m + spmm(op.halo, halo)
        return torch.cat([out_c, out_m])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        op, graph = ctx.op, ctx.graph
        ex = graph.exchange
        nc = op.num_central  # central rows of the operator (several per node if stacked)
        grad = grad.contiguous()
        pending = ex.start_backward(spmm(op.halo_t, grad[nc:])) if ex is not None else None
        if pending is not None and not graph.overlap:
            pending.wait()
        g_x = spmm(op.local_t, grad[nc:])
        if nc:
            g_x += spmm(op.central_t, grad[:nc])
        if pending is not None:
            ex.scatter_back(g_x, pending)  # decoded straight into g_x where the codec allows
        return g_x, None, None


def segment_softmax(src: torch.Tensor, index: torch.Tensor, num: int) -> torch.Tensor:
    """Softmax of `src` over entries sharing a destination `index` (edge-level attention)."""
    shape = (num,) + tuple(src.shape[1:])
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    peak = torch.full(shape, float("-inf"), dtype=src.dtype, device=src.device)
    peak = peak.scatter_reduce(0, idx, src, reduce="amax", include_self=True)
    e = (src - peak.gather(0, idx)).exp()
    total = torch.zeros(shape, dtype=src.dtype, device=src.device).index_add_(0, index, e)
    return e / (total.gather(0, idx) + 1e-16)


class MessagePassing(nn.Module):
    """Base class: subclass and override `message` (per edge) and/or `update` (per node).

    `message` may ask for any tensor given to `propagate` with suffix `_j`
    (source rows, halo included) or `_i` (destination rows), plus `edge_weight`,
    `edge_attr` (the graph's edge features), `index` (destination row of each
    edge within its block) and `dim_size`.
    """

    def __init__(self, aggr: str = "sum", norm: str = "none", self_loops: bool = False):
        super().__init__()
        if aggr not in ("sum", "mean", "max"):
            raise ValueError(f"aggr must be sum, mean or max, got '{aggr}'")
        self.aggr, self.norm, self.self_loops = aggr, norm, self_loops
        params = inspect.signature(self.message).parameters
        self._msg_args = list(params)
        self._upd_args = list(inspect.signature(self.update).parameters)[1:]
        self._fast = type(self).message is MessagePassing.message and aggr in ("sum", "mean") and not self_loops

    # ---------------------------------------------------------- overridables
    def message(self, x_j: torch.Tensor, edge_weight: torch.Tensor) -> torch.Tensor:
        return x_j * edge_weight.view(-1, *([1] * (x_j.dim() - 1)))

    def update(self, aggr: torch.Tensor) -> torch.Tensor:
        return aggr

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        return self.propagate(graph, x=x)

    # -------------------------------------------------------------- engine
    def propagate(self, graph: LocalGraph, **inputs: torch.Tensor) -> torch.Tensor:
        """Aggregate messages into every inner row; `inputs` hold inner rows only."""
        if self._fast:
            norm = "mean" if self.aggr == "mean" else self.norm
            out = HaloSpMM.apply(inputs["x"], graph.operator(norm), graph)
        else:
            out = self._propagate_edges(graph, inputs)
        upd = {k: inputs[k] for k in self._upd_args if k in inputs}
        return self.update(out, **upd)

    def _propagate_edges(self, graph: LocalGraph, inputs: dict) -> torch.Tensor:
        src_names = [a[:-2] for a in self._msg_args if a.endswith("_j")]
        for name in src_names + [a[:-2] for a in self._msg_args if a.endswith("_i")]:
            if name not in inputs:
                raise TypeError(f"{type(self).__name__}.message wants '{name}_*' but propagate got no '{name}'")
        edges = graph.edges(self.self_loops)
        ex = graph.exchange
        halo = {}
        if ex is not None and src_names:
            packed, sizes, tails = self._pack([inputs[n] for n in src_names])
            pending = ex.start(packed)
            if not graph.overlap:
                halo = self._unpack(HaloWait.apply(packed, pending, ex), src_names, sizes, tails)
        nc = graph.num_central
        out_c = self._aggregate_block(edges["central"], inputs, {n: inputs[n] for n in src_names}, 0, nc)
        if ex is not None and src_names and graph.overlap:
            halo = self._unpack(HaloWait.apply(packed, pending, ex), src_names, sizes, tails)
        sources = {n: torch.cat([inputs[n], halo[n]]) if n in halo else inputs[n] for n in src_names}
        out_m = self._aggregate_block(edges["marginal"], inputs, sources, nc, graph.num_inner)
        return torch.cat([out_c, out_m])

    @staticmethod
    def _pack(tensors):
        flat = [t.flatten(1) for t in tensors]
        return torch.cat(flat, dim=1), [f.shape[1] for f in flat], [tuple(t.shape[1:]) for t in tensors]

    @staticmethod
    def _unpack(packed, names, sizes, tails):
        parts = torch.split(packed, sizes, dim=1)
        return {n: p.reshape(p.shape[0], *tail) for n, p, tail in zip(names, parts, tails)}

    def _aggregate_block(self, block, inputs: dict, sources: dict, start: int, stop: int) -> torch.Tensor:
        rows, cols, w, attr = block
        n = stop - start
        kwargs = {}
        for a in self._msg_args:
            if a.endswith("_j"):
                kwargs[a] = sources[a[:-2]].index_select(0, cols)
            elif a.endswith("_i"):
                kwargs[a] = inputs[a[:-2]].index_select(0, rows + start)
            elif a == "edge_weight":
                kwargs[a] = w
            elif a == "edge_attr":
                if attr is None:
                    raise TypeError(f"{type(self).__name__}.message wants edge_attr but the graph has no edge features")
                kwargs[a] = attr
            elif a == "index":
                kwargs[a] = rows
            elif a == "dim_size":
                kwargs[a] = n
        msg = self.message(**kwargs)
        out = msg.new_zeros((n,) + tuple(msg.shape[1:]))
        if self.aggr == "max":
            idx = rows.view(-1, *([1] * (msg.dim() - 1))).expand_as(msg)
            out = out.scatter_reduce(0, idx, msg, reduce="amax", include_self=False)
        else:
            out = out.index_add(0, rows, msg)
            if self.aggr == "mean":
                cnt = torch.bincount(rows, minlength=n).clamp(min=1).to(msg.dtype)
                out = out / cnt.view(-1, *([1] * (msg.dim() - 1)))
        return out
