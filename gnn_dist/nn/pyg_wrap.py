"""`gd.nn.Distributed`: PyG's own convs and models on a part, unchanged (docs/layers.md, "PyG's own layers").

A PyG conv computes each output row from that row's in-edges, given the rows
its edges read (`x_src`) and the destination rows (`x_dst`). On a part it
runs once per block of destination rows: the central rows, whose in-edges
read inner rows only, while the halo travels through the exchange (codecs,
caches and the channel of the conv, as for any gnn-dist layer), then the
marginal rows with the halo. Each block's call sees only the rows its edges
read, and its own size. Three things the layer would do on the whole graph
are done here instead, as it would have done them:

- self loops: a layer with `add_self_loops` would add (i, i) for i < len(x_dst),
  wrong for every block but the first; its own are switched off for the call
  and the wrapper adds one per row (PyG's remove + add_self_loops), with the
  layer's `fill_value` for edge tensors;
- `size`: per block, where the layer's forward takes one; other layers get an
  `x_dst` of exactly the block's rows;
- edge tensors: given in the stored edges' order (`graph.edge_attr`'s, CSR by
  destination), one row per stored edge; each block gets its edges' rows.

A conv that holds a batch norm is not row-wise (the statistics couple the
rows), so it runs once on all rows, after the halo has come. The class of a
wrapped conv becomes a subclass of its own (`DistributedGATConv`), so the
object, its parameters and its state_dict keys stay PyG's.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.norm import BatchNorm
from gnn_dist.nn.pyg_propagate import run_on_part, start_fetch
from gnn_dist.nn.pyg_refusals import refusal
from partition.errors import UsageError

# PyG norms whose statistics run over all the nodes a call sees: per rank they would differ from one process
NODE_SET_NORMS = ("GraphNorm", "InstanceNorm", "PairNorm", "MeanSubtractionNorm", "DiffGroupNorm", "GraphSizeNorm")


@dataclass
class _Block:
    """One block of destination rows [lo, hi) as a PyG call sees it."""

    lo: int
    hi: int
    src: torch.Tensor  # part-local rows the block's edges read, sorted: its x_src
    edge_index: torch.Tensor  # [2, E_b]: row in src, row in the block; the block's added loops last
    pos: torch.Tensor  # stored position of each edge that is not an added loop
    slice_: tuple | None  # pos as (start, stop) when it is a range (no loops dropped): edge tensors are sliced


def _block(graph: LocalGraph, lo: int, hi: int, loops: bool, t) -> _Block:
    a, b = int(graph.indptr[lo]), int(graph.indptr[hi])
    rows = np.repeat(np.arange(lo, hi), np.diff(graph.indptr[lo: hi + 1]))
    cols, pos = graph.indices[a:b].astype(np.int64), np.arange(a, b)
    if loops:  # PyG's remove_self_loops, then one loop per row, appended
        keep = cols != rows
        pos, rows, cols = pos[keep], np.concatenate([rows[keep], np.arange(lo, hi)]), np.concatenate(
            [cols[keep], np.arange(lo, hi)])
    src = np.unique(cols)
    edge_index = np.stack([np.searchsorted(src, cols), rows - lo])
    whole = pos.shape[0] == b - a
    return _Block(lo, hi, t(src), t(edge_index), t(pos), (a, b) if whole else None)


def blocks(graph: LocalGraph, loops: bool, split: bool) -> dict:
    """The blocks of one part (central and marginal rows, or all rows at once), and the wrapper's edge order.

    "edge_index": [2, E'] part-local (source, destination) of every edge the layer sees: the stored
    edges (less their loops where the wrapper adds loops) in stored order, then the added loops by row,
    the order in which PyG's add_self_loops appends them. Per-edge results come back in it.
    """
    def make() -> dict:
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(graph.device, torch.int64)
        bounds = ((0, graph.num_central), (graph.num_central, graph.num_inner)) if split else ((0, graph.num_inner),)
        parts = [_block(graph, lo, hi, loops, t) for lo, hi in bounds]
        local = [torch.stack([b.src[b.edge_index[0]], b.edge_index[1] + b.lo]) for b in parts]
        stored = [e[:, : b.pos.shape[0]] for e, b in zip(local, parts)]
        added = [e[:, b.pos.shape[0]:] for e, b in zip(local, parts)]
        return {"blocks": parts, "edge_index": torch.cat(stored + added, dim=1)}

    return graph.cache(("pyg-blocks", loops, split), make)


@functools.lru_cache(maxsize=None)
def _signature(cls: type) -> inspect.Signature:
    """The PyG class's forward signature (self first)."""
    return inspect.signature(cls.forward)


def _graph_param(cls: type) -> str:
    """The forward parameter where PyG takes `edge_index` (third for GCN2Conv and PointGNNConv)."""
    names = list(_signature(cls).parameters)
    return "edge_index" if "edge_index" in names else names[2]


def _the_graph(graph, cls: type) -> LocalGraph:
    if not isinstance(graph, LocalGraph):
        raise TypeError(f"gd.nn.Distributed({cls.__name__}) is called with a graph (a LocalGraph) where PyG takes "
                        f"edge_index: got {type(graph).__name__}")
    return graph


def _check_rows(t: torch.Tensor, graph: LocalGraph, what: str, name: str) -> None:
    if t.shape[0] != graph.num_inner:
        raise ValueError(f"{name}: {what} has {t.shape[0]} rows but this part has {graph.num_inner} inner rows "
                         f"(give inner rows only; the halo is fetched)")


def _takes_pair(cls: type) -> bool:
    """Does the conv's forward take PyG's (x_src, x_dst) pair? (Its x annotation says so.)"""
    params = list(_signature(cls).parameters.values())
    note = str(params[1].annotation) if len(params) > 1 else ""
    return "Tuple" in note or "Pair" in note


def path_of(cls: type) -> str:
    """How `gd.nn.Distributed` runs a torch_geometric layer class: "pair" (by blocks of rows, overlapped),
    "propagate" (its own forward, the halo fetched at each propagate), "wrapper" (a module whose convs are
    converted one by one), or "refused: <why>" (docs/layers.md's table)."""
    from torch_geometric.nn.conv import MessagePassing as PyGMessagePassing

    why = refusal(cls)
    if why:
        return f"refused: {why}"
    if not issubclass(cls, PyGMessagePassing):
        return "wrapper"
    return "pair" if _takes_pair(cls) else "propagate"


def _row_coupled(conv: nn.Module) -> bool:
    """A conv holding a batch norm: its output rows are not computed from their own in-edges alone."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in conv.modules())


class Distributed(nn.Module):
    """`gd.nn.Distributed(layer_or_model)`: a PyG conv, or every conv of a PyG model, run on a part.

    Returns the same object, changed in place: a conv is called as `conv(x, graph, **edge_tensors)`
    (x: this rank's inner rows; edge tensors: one row per stored edge), a model as `model(x, graph)`
    (its forward passes `graph` where PyG passes `edge_index`). In a model, `torch.nn.BatchNorm1d`
    becomes `gd.nn.BatchNorm` (statistics over every rank's rows). State dict keys stay PyG's. Dropout
    inside PyG layers draws per-rank masks, so a distributed run equals one process in eval mode or
    at dropout 0.
    """

    def __new__(cls, module: nn.Module | None = None):
        if module is None:  # copy.deepcopy and pickle rebuild a wrapped conv through here
            return super().__new__(cls)
        return _distribute(module)

    def __init__(self, module: nn.Module | None = None):
        """Nothing to do: the object was a built PyG module, converted in `__new__`."""

    def forward(self, *args, **kwargs):
        """The PyG layer's own forward, with `graph` (a LocalGraph) where it takes `edge_index`; called with
        PyG's own `edge_index` (or a sparse `adj_t`), it is PyG's layer, unchanged, in one process."""
        cls = _pyg_class(type(self))
        bound = _signature(cls).bind(self, *args, **kwargs).arguments  # bound once: this runs every layer call
        edges = bound.get(_graph_param(cls))
        if isinstance(edges, torch.Tensor) or type(edges).__name__ == "SparseTensor":  # torch_sparse's adj_t
            return cls.forward(self, *args, **kwargs)
        if not _takes_pair(cls):
            return self._gd_propagate(bound)
        x, graph, rest, edge = self._gd_arguments(bound)
        src, dst = x if isinstance(x, tuple) else (x, x)
        for t, what in ((src, "x"), (dst, "x_dst")):
            _check_rows(t, graph, what, type(self).__name__)
        with self._gd_own_loops_off() as loops:
            split = not _row_coupled(self)
            return self._gd_run(graph, src, dst, rest, edge, blocks(graph, loops, split))

    def reset_parameters(self):
        """PyG's reset; the conv's caches on parts (`cached=True`) are dropped too, as PyG drops its own."""
        _pyg_class(type(self)).reset_parameters(self)
        self.__dict__["_gd_resets"] = self.__dict__.get("_gd_resets", 0) + 1

    def _gd_propagate(self, bound: dict):
        """A conv without a pair: its own forward on the inner rows, the halo fetched at each propagate."""
        cls = _pyg_class(type(self))
        graph_name, x_name = _graph_param(cls), list(_signature(cls).parameters)[1]
        graph = _the_graph(bound.get(graph_name), cls)
        bound.pop("self")
        if bound.get("size") is not None:
            raise ValueError(f"gd.nn.Distributed({cls.__name__}): sizes are the wrapper's; give no size")
        if isinstance(bound.get(x_name), torch.Tensor):
            _check_rows(bound[x_name], graph, x_name, type(self).__name__)
        for key, value in bound.items():  # edge_weight, edge_attr, edge_type: one row per stored edge
            if key.startswith("edge_") and isinstance(value, torch.Tensor) and value.dim() and \
                    value.shape[0] != graph.num_edges:
                raise ValueError(f"gd.nn.Distributed({cls.__name__}): '{key}' has {value.shape[0]} rows but this part "
                                 f"has {graph.num_edges} stored edges (edge tensors follow graph.edge_attr's order)")
        return run_on_part(self, cls, bound, graph_name, graph)

    def _gd_arguments(self, bound: dict) -> tuple:
        """(x, graph, other arguments, edge tensors) from a call spelled as for the PyG layer (bound to its
        signature; consumed)."""
        cls = _pyg_class(type(self))
        sig = _signature(cls)
        x_name, graph_name = list(sig.parameters)[1], _graph_param(cls)
        x, graph = bound.pop(x_name), _the_graph(bound.pop(graph_name, None), cls)
        bound.pop("self")
        name = cls.__name__
        if bound.pop("size", None) is not None:
            raise ValueError(f"gd.nn.Distributed({name}): sizes are the wrapper's (per block); give no size")
        edge = {}
        for key, value in list(bound.items()):
            if isinstance(value, torch.Tensor) and value.dim():
                if value.shape[0] != graph.num_edges:
                    raise ValueError(f"gd.nn.Distributed({name}): '{key}' has {value.shape[0]} rows but this part "
                                     f"has {graph.num_edges} stored edges (edge tensors follow graph.edge_attr's order)")
                edge[key] = bound.pop(key)
        return x, graph, bound, edge

    @contextlib.contextmanager
    def _gd_own_loops_off(self):
        """Yields whether the wrapper adds the self loops: the layer's own are off meanwhile."""
        own = getattr(self, "add_self_loops", None) is True
        if own:
            self.add_self_loops = False
        try:
            yield own
        finally:
            if own:
                self.add_self_loops = True

    def _gd_run(self, graph: LocalGraph, src: torch.Tensor, dst: torch.Tensor, rest: dict, edge: dict, plan: dict):
        """Central rows while the halo travels, then the rest (or all rows at once, after it)."""
        halo, fetch = start_fetch(graph, self, src)
        if fetch is not None and not graph.overlap:  # wait now; the autograd graph, so the order of sums, stays
            fetch.settle()
        results, last = [], len(plan["blocks"]) - 1
        for i, block in enumerate(plan["blocks"]):  # the last block reads the halo
            if fetch is not None and i == last:
                halo, fetch = fetch.halo(), None
            if block.hi > block.lo or not last:
                rows = torch.cat([src, halo]) if i == last and halo is not None else src
                results.append((block, self._gd_call(block, rows, dst, rest, edge)))
        tie = halo if halo is not None and results[-1][0] is not plan["blocks"][-1] else None
        return _merge(results, plan, tie)

    def _gd_call(self, block: _Block, rows: torch.Tensor, dst: torch.Tensor, rest: dict, edge: dict):
        """The PyG forward on one block: its source rows, its destination rows, its edges."""
        cls = _pyg_class(type(self))
        x_src, x_dst = rows.index_select(0, block.src), dst[block.lo: block.hi]
        kwargs = dict(rest)
        for key, t in edge.items():
            kwargs[key] = self._gd_edge_rows(block, t)
        if "size" in _signature(cls).parameters:
            kwargs["size"] = (x_src.shape[0], x_dst.shape[0])
        return cls.forward(self, (x_src, x_dst), block.edge_index, **kwargs)

    def _gd_edge_rows(self, block: _Block, t: torch.Tensor) -> torch.Tensor:
        """An edge tensor's rows for one block's edges; added loops get the layer's fill value, as in PyG."""
        rows = t[block.slice_[0]: block.slice_[1]] if block.slice_ is not None else t.index_select(0, block.pos)
        added = block.edge_index.shape[1] - rows.shape[0]
        if not added:
            return rows
        from torch_geometric.utils.loop import compute_loop_attr

        stored = block.edge_index[:, : rows.shape[0]]
        return torch.cat([rows, compute_loop_attr(stored, rows, added, False, getattr(self, "fill_value", None))])


def _merge(results: list, plan: dict, tie: torch.Tensor | None):
    """One output from the blocks' outputs: rows in order; a per-edge result `(out, (edge_index, values))`
    (PyG's return_attention_weights) as the part's edges in the wrapper's order.

    `tie`: a halo no block read (a rank without marginal rows): the output depends on it by zero, so that
    its backward, an all-to-all every rank joins, runs here too.
    """
    per_edge = isinstance(results[0][1], tuple)
    if per_edge and not (len(results[0][1]) == 2 and isinstance(results[0][1][1], tuple)):
        raise TypeError("gd.nn.Distributed: the layer returned a tuple other than (out, (edge_index, per-edge values))")
    outs = [r[0] if per_edge else r for _, r in results]
    out = torch.cat(outs) if len(outs) > 1 else outs[0]
    if tie is not None:
        out = out + tie.sum() * 0
    if not per_edge:
        return out
    stored = [r[1][1][: b.pos.shape[0]] for b, r in results]
    added = [r[1][1][b.pos.shape[0]:] for b, r in results]
    return out, (plan["edge_index"], torch.cat(stored + added))


_CLASSES: dict[type, type] = {}


def _pyg_class(cls: type) -> type:
    """The PyG class a wrapped conv's class was made from."""
    return cls.__bases__[1]


def _distributed_class(cls: type) -> type:
    """`Distributed<Name>`, a subclass of both: made once per PyG class, and findable by pickle here."""
    if cls not in _CLASSES:
        name = f"Distributed{cls.__name__}"
        while name in globals():
            name += "_"
        made = type(name, (Distributed, cls), {"__module__": __name__, "__doc__": Distributed.__doc__})
        globals()[name] = _CLASSES[cls] = made
    return _CLASSES[cls]


def _check_conv(conv: nn.Module, where: str) -> None:
    """One line for a conv that this instance's settings keep from running on a part."""
    cls = type(conv)
    if not _takes_pair(cls) and getattr(conv, "decomposed_layers", 1) > 1:
        raise UsageError(f"gd.nn.Distributed: {where}{cls.__name__} has decomposed_layers="
                         f"{conv.decomposed_layers}, which splits propagate's inputs; on a part they are pairs: use 1")
    if getattr(conv, "flow", "source_to_target") != "source_to_target":
        raise UsageError(f"gd.nn.Distributed: {where}{cls.__name__} has flow='{conv.flow}'; only source_to_target "
                         f"runs on a part (the in-edges of its rows)")


def _convert_conv(conv: nn.Module) -> None:
    conv.__class__ = _distributed_class(type(conv))


def _distribute(module: nn.Module) -> nn.Module:
    """Convert every PyG conv in `module` (or `module` itself) and its batch norms, in place."""
    from torch_geometric.nn.conv import MessagePassing as PyGMessagePassing
    from torch_geometric.nn.norm import LayerNorm

    if not isinstance(module, nn.Module):
        raise TypeError(f"gd.nn.Distributed wraps a torch_geometric conv or model, not {type(module).__name__}")
    for name, m in module.named_modules():  # refused before anything is converted: no half-converted model
        where = f"'{name}' " if name else ""
        if refusal(type(m)):
            raise UsageError(f"gd.nn.Distributed: {where}{type(m).__name__} cannot run on a part: {refusal(type(m))}")
        if isinstance(m, PyGMessagePassing) and not isinstance(m, Distributed):
            _check_conv(m, where)
    convs = 0
    for name, m in module.named_modules():
        where = f"'{name}' " if name else ""
        if isinstance(m, Distributed):
            convs += 1
        elif isinstance(m, PyGMessagePassing):
            _convert_conv(m)
            convs += 1
        elif type(m) is nn.BatchNorm1d:
            m.__class__ = BatchNorm  # the same parameters and buffers, statistics over every rank's rows
        elif type(m).__name__ in NODE_SET_NORMS or (isinstance(m, LayerNorm) and m.mode == "graph"):
            raise UsageError(f"gd.nn.Distributed: {where}{type(m).__name__} normalises over all the nodes of a call, "
                             f"which on a part are one rank's; use batch_norm (gd.nn.BatchNorm) or LayerNorm(mode='node')")
    if not convs:
        raise UsageError(f"gd.nn.Distributed: {type(module).__name__} holds no torch_geometric conv")
    return module
