"""The one extension point for layers: message / aggregate / update, like PyG's MessagePassing.

A layer never sees ranks. `propagate` asks the graph it is given whether halo
rows must be fetched; if so it starts the exchange, aggregates the central
rows (which read inner rows only) while messages are in flight, waits, and
aggregates the marginal rows. Layers that keep the default `message` take the
fast path: one sparse CSR product per block, with overlap in backward too.
Both paths compute the same function (the table in `MessagePassing`).

Whether an exchange is exact is decided here, per call, not by a flag: a
forward without autograd or with the module in eval mode sends exact fp32
and touches no training channel (`HaloExchange.channel`).
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from gnn_dist.graph.local import LocalGraph, SplitOperator, spmm
from gnn_dist.runtime.halo_fetch import HaloFetch

AGGRS = {"sum": "sum", "add": "sum", "mean": "mean", "max": "max"}  # PyG's "add" is "sum"
NORMS = {"none": "none", "raw": "none", "gcn": "gcn"}
# what message() may ask for besides <input>_j / <input>_i and inputs given to propagate by name
EDGE_ARGS = ("edge_weight", "edge_attr", "index", "ptr", "dim_size", "size_i", "size_j", "edge_index_i",
             "edge_index_j")


def exchange_channel(graph: LocalGraph, owner: nn.Module) -> str | None:
    """The halo channel of one exchange by `owner`: None (exact, stateless) unless it is training."""
    if graph.exchange is None:
        return None
    return graph.exchange.channel(owner, owner.training and torch.is_grad_enabled())


def provided_halo(graph: LocalGraph, x: torch.Tensor) -> torch.Tensor | None:
    """x's halo rows if the graph's exchange already holds them (`HaloExchange.provide`), else None."""
    return graph.exchange.held(x) if graph.exchange is not None else None


class HaloSpMM(torch.autograd.Function):
    """out = A @ [x; halo(x)], everything but the halo columns computed while the exchange is in flight."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, op: SplitOperator, graph: LocalGraph, channel: str | None) -> torch.Tensor:
        ctx.op, ctx.graph, ctx.channel = op, graph, channel
        fetch = HaloFetch(graph.exchange, x, channel) if graph.exchange is not None else None
        if fetch is not None and not graph.overlap:
            fetch.settle()
        out, nc = _rows_of(op, x), op.num_central
        spmm(op.central, x, out[:nc])
        spmm(op.local, x, out[nc:])
        if fetch is not None:
            spmm(op.halo, fetch.rows(), out[nc:], add=True)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        op, graph = ctx.op, ctx.graph
        ex = graph.exchange
        nc = op.num_central  # central rows of the operator (several per node if stacked)
        grad = grad.contiguous()
        pending = ex.start_backward(spmm(op.halo_t, grad[nc:]), ctx.channel) if ex is not None else None
        if pending is not None and not graph.overlap:
            pending.wait()
        g_x = spmm(op.local_t, grad[nc:])
        if nc:
            spmm(op.central_t, grad[:nc], g_x, add=True)
        if pending is not None:
            ex.scatter_back(g_x, pending)  # decoded straight into g_x where the codec allows
        return g_x, None, None, None


class ProvidedSpMM(torch.autograd.Function):
    """out = A @ [x; halo] with the halo already at hand (`HaloExchange.held`): no exchange either way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, halo: torch.Tensor, op: SplitOperator) -> torch.Tensor:
        ctx.op = op
        out, nc = _rows_of(op, x), op.num_central
        spmm(op.central, x, out[:nc])
        spmm(op.local, x, out[nc:])
        spmm(op.halo, halo, out[nc:], add=True)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        op, nc = ctx.op, ctx.op.num_central
        grad = grad.contiguous()
        g_x = spmm(op.central_t, grad[:nc])
        return spmm(op.local_t, grad[nc:], g_x, add=True), spmm(op.halo_t, grad[nc:]), None


def _rows_of(op: SplitOperator, x: torch.Tensor) -> torch.Tensor:
    """The product's result, uninitialised: central rows then marginal rows, each block written in place."""
    return x.new_empty((op.num_central + op.num_marginal,) + tuple(x.shape[1:]))


def segment_softmax(src: torch.Tensor, index: torch.Tensor, num: int) -> torch.Tensor:
    """Softmax of `src` over entries sharing a destination `index` (edge-level attention)."""
    shape = (num,) + tuple(src.shape[1:])
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    peak = torch.full(shape, float("-inf"), dtype=src.dtype, device=src.device)
    peak = peak.scatter_reduce(0, idx, src, reduce="amax", include_self=True)
    e = (src - peak.gather(0, idx)).exp()
    total = torch.zeros(shape, dtype=src.dtype, device=src.device).index_add_(0, index, e)
    return e / (total.gather(0, idx) + 1e-16)


def _parameters(fn) -> tuple[list[str], set[str]]:
    """(names, names with a default) of a bound method's parameters: what a hook asks for, and may go without."""
    params = list(inspect.signature(fn).parameters.values())
    return [p.name for p in params], {p.name for p in params if p.default is not inspect.Parameter.empty}


class MessagePassing(nn.Module):
    """Base class: subclass and override `message` (per edge) and/or `update` (per node).

    The default message is `x_j * edge_weight`; `norm` only decides which
    edge weight a message receives (w is the graph's edge weight, 1 where it
    has none, or always 1 with `weighted=False`):

    | aggr (alias)  | norm (alias) | edge_weight given to message      | default output for node i   |
    |---------------|--------------|-----------------------------------|-----------------------------|
    | sum (add)     | none (raw)   | w_ij                              | sum_j w_ij x_j              |
    | sum           | gcn          | w_ij / sqrt(d_i d_j), d = loop + incoming w; a unit loop is added where a node has none (PyG's gcn_norm) | sum_j w_ij x_j / sqrt(d_i d_j) |
    | mean          | none         | w_ij                              | sum_j w_ij x_j / in-degree  |
    | max           | none         | w_ij                              | max_j w_ij x_j              |

    mean or max with gcn, and norm="mean" (use aggr="mean"), are refused.
    `self_loops=True` replaces the graph's loops by one unit loop per node
    first (GAT). A hand-written `message` decides for itself what to do
    with `edge_weight`. Per-edge inputs and results follow the layer's edge
    order (`edge_index`): the stored edges' (`graph.edge_attr`'s) where the
    layer adds no loops.
    """  # noqa: E501 (the table)

    def __init__(self, aggr: str = "sum", norm: str = "none", self_loops: bool = False, weighted: bool = True):
        super().__init__()
        name = type(self).__name__
        if aggr not in AGGRS:
            raise ValueError(f"{name}: aggr must be sum (or add), mean or max, got '{aggr}'")
        if norm == "mean":
            raise ValueError(f"{name}: norm='mean' is not a normalisation; use aggr='mean' for a mean over in-edges")
        if norm not in NORMS:
            raise ValueError(f"{name}: norm must be none (or raw) or gcn, got '{norm}'")
        self.aggr, self.norm, self.self_loops, self.weighted = AGGRS[aggr], NORMS[norm], self_loops, weighted
        if self.norm == "gcn" and self.aggr != "sum":
            raise ValueError(f"{name}: norm='gcn' needs aggr='sum' (got aggr='{aggr}')")
        if self.norm == "gcn" and self_loops:
            raise ValueError(f"{name}: norm='gcn' adds its own self loops; drop self_loops=True")
        self._msg_args, self._msg_optional = _parameters(self.message)
        self._edge_args, self._edge_optional = _parameters(self.edge_update)
        upd = list(inspect.signature(self.update).parameters.values())[1:]
        self._upd_args = [p.name for p in upd]
        self._upd_required = {p.name for p in upd if p.default is inspect.Parameter.empty}
        self._fast = type(self).message is MessagePassing.message and self.aggr != "max" and not self_loops

    # ---------------------------------------------------------- overridables
    def message(self, x_j: torch.Tensor, edge_weight: torch.Tensor) -> torch.Tensor:
        """One message per edge (rows are edges). May ask for, by parameter name:

        - `<name>_j` / `<name>_i`: rows of input `<name>` given to `propagate` at each edge's source
          (inner or halo row) / destination (inner row);
        - `<name>`: an input given to `propagate`: an edge input (one row per edge of the layer's edge
          order, `edge_index`) arrives as this block's edges, anything else as given;
        - `edge_weight` (see the class table), `edge_attr` (the graph's edge features, unless given);
        - `index` (destination row of each edge within the block being aggregated), `ptr` (CSR
          offsets of `index`, which is sorted), `dim_size` / `size_i` (rows in that block),
          `size_j` (source rows, halo included);
        - `edge_index_i` / `edge_index_j`: part-local destination / source row of each edge.

        A parameter with a default may go without (an input not given, a graph without edge features).
        Called once per block (central rows while the halo travels, then marginal rows); a value per
        edge for the whole part comes from `edge_updater`.
        """
        return x_j * edge_weight.view(-1, *([1] * (x_j.dim() - 1)))

    def update(self, aggr: torch.Tensor) -> torch.Tensor:
        """Per inner row, after aggregation; may ask for any input given to `propagate` by name."""
        return aggr

    def edge_update(self) -> torch.Tensor:
        """One value per edge, for `edge_updater` (PyG's edge_update, e.g. attention weights); asks for
        what `message` may ask for. Override it to use `edge_updater`."""
        raise NotImplementedError(f"{type(self).__name__} defines no edge_update, which edge_updater calls")

    def forward(self, x: torch.Tensor, graph: LocalGraph) -> torch.Tensor:
        """Default: aggregate x's messages (override to add weights, skips, normalisation)."""
        return self.propagate(graph, x=x)

    # -------------------------------------------------------------- engine
    def edge_index(self, graph: LocalGraph) -> torch.Tensor:
        """[2, E'] part-local (source, destination) rows of this layer's edges, in its edge order: the stored
        edges' (CSR by destination, `graph.edge_attr`'s), less the loops `self_loops=True` drops, then the
        loops the layer adds, by row. Edge inputs are given, and `edge_updater`'s results come, in it."""
        return graph.edges(self._loops(), self.norm, self.weighted)["edge_index"]

    def _loops(self) -> str:
        return "replace" if self.self_loops else ("remaining" if self.norm == "gcn" else "keep")

    def propagate(self, graph: LocalGraph, **inputs) -> torch.Tensor:
        """Aggregate messages into every inner row; returns `update(aggregate, ...)`.

        Each node input holds this rank's inner rows (halo rows are fetched); `x=(x_src, x_dst)` is PyG's
        bipartite form: messages read `x_j` from x_src (exchanged) and `x_i` from x_dst. An input that
        `message` reads under its own name and that has one row per edge (`edge_index`) is an edge input.
        """
        edge_inputs = self._check_inputs(graph, inputs, "message")
        channel = exchange_channel(graph, self)
        if self._fast and not edge_inputs:
            src = inputs["x"][0] if isinstance(inputs["x"], tuple) else inputs["x"]
            op = graph.operator(self.aggr, self.norm, self.weighted)
            halo = provided_halo(graph, src)
            out = HaloSpMM.apply(src, op, graph, channel) if halo is None else ProvidedSpMM.apply(src, halo, op)
        else:
            out = torch.cat(self._run_blocks(graph, inputs, edge_inputs, channel, "message"))
        return self.update(out, **{k: inputs[k] for k in self._upd_args if k in inputs})

    def edge_updater(self, graph: LocalGraph, **inputs) -> torch.Tensor:
        """`edge_update` on every edge of the part: one row per edge, in the layer's edge order (`edge_index`).

        Inputs as for `propagate`; `_j` inputs' halo rows are fetched (one exchange), and the central
        rows' edges are computed while they travel. The result may go back into `propagate` as an edge
        input, as PyG's GATConv passes `alpha`.
        """
        if type(self).edge_update is MessagePassing.edge_update:
            self.edge_update()  # says what is missing
        edge_inputs = self._check_inputs(graph, inputs, "edge_update")
        blocks = self._run_blocks(graph, inputs, edge_inputs, exchange_channel(graph, self), "edge_update")
        inverse = graph.edges(self._loops(), self.norm, self.weighted)["inverse"]
        return torch.cat(blocks).index_select(0, inverse)

    def _check_inputs(self, graph: LocalGraph, inputs: dict, hook: str) -> set:
        """One-line errors for inputs that cannot work; returns the names of the edge inputs."""
        name = type(self).__name__
        args, optional = (self._msg_args, self._msg_optional) if hook == "message" else \
            (self._edge_args, self._edge_optional)
        node_use = {a[:-2] for a in args if a.endswith(("_i", "_j"))}
        if hook == "message":
            node_use |= set(self._upd_args)
        edges, edge_inputs = None, set()
        for key, value in inputs.items():
            for t in value if isinstance(value, tuple) else (value,):
                if not isinstance(t, torch.Tensor) or not t.dim():
                    continue
                if t is value and key in args and key not in node_use:  # read under its own name: may be per edge
                    edges = self.edge_index(graph).shape[1] if edges is None else edges
                    if t.shape[0] == edges:
                        edge_inputs.add(key)
                        continue
                if t.shape[0] != graph.num_inner:
                    per_edge = f" or {edges} edges (an edge input, in edge_index's order)" if edges is not None else ""
                    raise ValueError(f"{name}.{'propagate' if hook == 'message' else 'edge_updater'}: '{key}' has "
                                     f"{t.shape[0]} rows but this part has {graph.num_inner} inner rows{per_edge} "
                                     f"(give inner rows only; the halo is fetched)")
        missing = sorted(self._upd_required - set(inputs)) if hook == "message" else []
        if missing:
            raise TypeError(f"{name}.update wants '{missing[0]}' but propagate got no '{missing[0]}' "
                            f"(got: {', '.join(inputs) or 'nothing'})")
        for a in args:
            base = a[:-2] if a.endswith(("_i", "_j")) else None
            if a in inputs or a in EDGE_ARGS or a in optional or (base is not None and base in inputs):
                continue
            raise TypeError(f"{name}.{hook} wants '{a}', which is neither an input given to "
                            f"{'propagate' if hook == 'message' else 'edge_updater'} "
                            f"(got: {', '.join(inputs) or 'nothing'}) nor one of {', '.join(EDGE_ARGS)}")
        if self._fast and hook == "message" and "x" not in inputs:
            raise TypeError(f"{name}: the default message reads x_j, so propagate needs x=...")
        return edge_inputs

    @staticmethod
    def _side(value, j: bool):
        return (value[0] if j else value[1]) if isinstance(value, tuple) else value

    def _run_blocks(self, graph: LocalGraph, inputs: dict, edge_inputs: set, channel: str | None,
                    hook: str) -> list[torch.Tensor]:
        """`hook` (message, then aggregation; or edge_update) on the central rows' edges while the `_j`
        inputs' halo travels, then on the marginal rows' edges: [central result, marginal result]."""
        args = self._msg_args if hook == "message" else self._edge_args
        src_names = [a[:-2] for a in args if a.endswith("_j") and a[:-2] in inputs]
        edges = graph.edges(self._loops(), self.norm, self.weighted)
        ex = graph.exchange
        src_inner = {n: self._side(inputs[n], True) for n in src_names}
        halo = {n: provided_halo(graph, t) for n, t in src_inner.items()}
        if all(h is not None for h in halo.values()):  # every source's halo at hand (provided): no exchange
            ex = None
        else:
            halo = {}
        if ex is not None and src_names:
            packed, sizes, tails = self._pack([src_inner[n] for n in src_names])
            fetch = HaloFetch(ex, packed, channel)
            if not graph.overlap:
                halo = self._unpack(fetch.halo(), src_names, sizes, tails)
        nc = graph.num_central
        run = self._aggregate_block if hook == "message" else self._edge_block
        out_c = run(graph, edges["central"], inputs, edge_inputs, src_inner, 0, nc)
        if ex is not None and src_names and graph.overlap:
            halo = self._unpack(fetch.halo(), src_names, sizes, tails)
        sources = {n: torch.cat([src_inner[n], halo[n]]) if n in halo else src_inner[n] for n in src_names}
        return [out_c, run(graph, edges["marginal"], inputs, edge_inputs, sources, nc, graph.num_inner)]

    @staticmethod
    def _pack(tensors):
        flat = [t.flatten(1) for t in tensors]
        return torch.cat(flat, dim=1), [f.shape[1] for f in flat], [tuple(t.shape[1:]) for t in tensors]

    @staticmethod
    def _unpack(packed, names, sizes, tails):
        parts = torch.split(packed, sizes, dim=1)
        return {n: p.reshape(p.shape[0], *tail) for n, p, tail in zip(names, parts, tails)}

    def _collect(self, graph: LocalGraph, block, inputs: dict, edge_inputs: set, sources: dict, start: int,
                 stop: int, hook: str) -> dict:
        """What `hook` asks for, on one block's edges."""
        rows, cols, w, attr, eid = block
        args, optional = (self._msg_args, self._msg_optional) if hook == "message" else \
            (self._edge_args, self._edge_optional)
        n = stop - start
        local_rows = rows + start  # part-local destination rows
        kwargs = {}
        for a in args:
            if a.endswith("_j") and a[:-2] in sources:
                kwargs[a] = sources[a[:-2]].index_select(0, cols)
            elif a.endswith("_i") and a[:-2] in inputs:
                kwargs[a] = self._side(inputs[a[:-2]], False).index_select(0, local_rows)
            elif a in edge_inputs:
                kwargs[a] = inputs[a].index_select(0, eid)
            elif a in inputs:
                kwargs[a] = inputs[a]
            elif a == "edge_weight":
                kwargs[a] = w
            elif a == "edge_attr":
                if attr is not None:
                    kwargs[a] = attr
                elif a not in optional:
                    raise TypeError(f"{type(self).__name__}.{hook} wants edge_attr but the graph has no edge features")
            elif a == "index":
                kwargs[a] = rows
            elif a in ("dim_size", "size_i"):
                kwargs[a] = n
            elif a == "size_j":
                kwargs[a] = graph.num_src
            elif a == "ptr":
                ptr = torch.zeros(n + 1, dtype=torch.int64, device=rows.device)
                ptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
                kwargs[a] = ptr
            elif a == "edge_index_i":
                kwargs[a] = local_rows
            elif a == "edge_index_j":
                kwargs[a] = cols
        return kwargs

    def _edge_block(self, graph: LocalGraph, block, inputs: dict, edge_inputs: set, sources: dict, start: int,
                    stop: int) -> torch.Tensor:
        return self.edge_update(**self._collect(graph, block, inputs, edge_inputs, sources, start, stop, "edge_update"))

    def _aggregate_block(self, graph: LocalGraph, block, inputs: dict, edge_inputs: set, sources: dict, start: int,
                         stop: int) -> torch.Tensor:
        rows, n = block[0], stop - start
        msg = self.message(**self._collect(graph, block, inputs, edge_inputs, sources, start, stop, "message"))
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
