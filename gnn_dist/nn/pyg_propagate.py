"""The propagate path of `gd.nn.Distributed`: PyG convs whose forward takes no (x_src, x_dst) pair.

GCNConv, SGConv, APPNP, ChebConv and the other multi-hop convs run their own
`forward` on the part's inner rows, given the part's in-edges as `edge_index`
(sources are part-local rows: inner, then halo; destinations are inner rows).
At each `propagate` (and `edge_updater`) a pre-hook fetches the halo of every
node input whose messages read `<name>_j` and hands PyG the pair (inner +
halo rows, inner rows) along the conv's `node_dim`, with `size=(inner + halo,
inner)`: each call is one exchange channel, named by call order, so a K-hop
conv exchanges K times a step. Everything outside `propagate` (linear maps,
bias, APPNP's `alpha * h`) acts on inner rows, as on one process.

Normalisations that read degrees are the only other thing a part gets wrong
by itself, so within the call the conv's PyG modules see the part's versions
of `gcn_norm`, `get_laplacian` and `spmm` (`gnn_dist.nn.pyg_part_norms`), and
the conv's own caches (GCNConv's `_cached_edge_index`, SGConv's `_cached_x`)
hold the part's version during the call.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref

import torch

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dropout import input_dropout
from gnn_dist.nn.message_passing import exchange_channel, provided_halo
from gnn_dist.nn.pyg_part_norms import PartNorms, fusable
from gnn_dist.runtime.halo_fetch import HaloFetch


def start_fetch(graph: LocalGraph, owner, src: torch.Tensor) -> tuple[torch.Tensor | None, HaloFetch | None]:
    """(the halo of `src` if held already, else None; the fetch started for it, else None): the input
    features' halo comes from the input cache, other tensors' on `owner`'s next training channel."""
    if graph.exchange is None:
        return None, None
    halo = provided_halo(graph, src)
    if halo is not None:  # (a held halo names no channel: the names are the checkpoints' keys)
        return halo, None
    if graph.is_input(src):  # the input features: their halo is fetched once (the input cache)
        input_dropout(src, graph, 0.0, False)
    return None, HaloFetch(graph.exchange, src, exchange_channel(graph, owner))


def local_edge_index(graph: LocalGraph) -> torch.Tensor:
    """[2, E] the part's stored in-edges: (part-local source row, inner destination row), in stored order,
    so that edge tensors given per stored edge line up with it."""
    def make() -> torch.Tensor:
        rows = torch.repeat_interleave(torch.arange(graph.num_inner), torch.from_numpy(graph.indptr).diff())
        return torch.stack([torch.from_numpy(graph.indices).to(torch.int64), rows]).to(graph.device)

    return graph.cache(("pyg-local-edges",), make)


@functools.lru_cache(maxsize=None)
def _reads(cls: type, hook: str) -> tuple[tuple, tuple]:
    """(names read at the source `<name>_j`, names read at the destination `<name>_i`) by `hook`, in its
    signature's order: the order of the exchanges, the same on every rank (a set's is not)."""
    names = [p for p in inspect.signature(getattr(cls, hook)).parameters if p not in ("edge_index_j", "size_j",
                                                                                         "edge_index_i", "size_i")]
    return tuple(p[:-2] for p in names if p.endswith("_j")), tuple(p[:-2] for p in names if p.endswith("_i"))


def _maps_input_first(cls: type) -> bool:
    """Is the conv's forward PyG's GCNConv's, which maps its input by `self.lin` (no bias) before propagating it?"""
    from torch_geometric.nn import GCNConv

    return cls.forward is GCNConv.forward


class _Undo:
    """A removable handle for an instance attribute set for one call."""

    def __init__(self, obj, name: str):
        self.obj, self.name = obj, name

    def remove(self) -> None:
        self.obj.__dict__.pop(self.name, None)


def _input_cache_through_lin(conv, cls: type, graph: LocalGraph, norms: PartNorms) -> list:
    """GCNConv's A (X W) of the input features X, run as (A X) W: X's halo is the input cache's (fetched once),
    so the layer sends nothing and maps only inner rows, as gnn-dist's own GCN does. Its `lin` hands X on
    unmapped, marked; the fused product maps A X (`PartNorms.spmm`), and any other reader gets lin(X)."""
    ex, lin = graph.exchange, getattr(conv, "lin", None)
    if ex is None or not ex.config.input_cache or not _maps_input_first(cls) or getattr(lin, "bias", 0) is not None \
            or lin._forward_hooks or lin._forward_pre_hooks:  # (a hook of the user's would see X for lin(X))
        return []

    mapped = functools.partial(type(lin).forward, lin)

    def forward(x):
        if graph.is_input(x) and not x.requires_grad:
            norms.mapped[id(x)] = (x, mapped)
            return x
        return mapped(x)

    lin.__dict__["forward"] = forward
    return [_Undo(lin, "forward")]


def _fused(conv, norms: PartNorms, edge_index, kwargs: dict):
    """adj_t for a propagate that gnn-dist's own product can run (`PartNorms.spmm`), else None."""
    x, w = kwargs.get("x"), kwargs.get("edge_weight")
    if not (fusable(type(conv)) and set(kwargs) <= {"x", "edge_weight"} and isinstance(x, torch.Tensor)
            and x.dim() == 2 and x.dtype == torch.float32 and conv.aggr in ("add", "sum") and not conv.explain
            and conv.decomposed_layers == 1 and isinstance(edge_index, torch.Tensor)
            and (w is None or not w.requires_grad)):
        return None
    made = norms.operator(edge_index, w)
    if made is None:
        return None
    norms.fused[id(made[0])] = (conv, made[1])
    return made[0]


def _pair_hook(graph: LocalGraph, hook: str, norms: PartNorms):
    """A propagate / edge_updater pre-hook: node inputs read at sources become (inner + halo, inner) pairs; a
    plain weighted sum runs as gnn-dist's own product instead (`_fused`)."""
    def pre(conv, inputs):
        edge_index, size, kwargs = inputs
        if size is not None:
            raise ValueError(f"gd.nn.Distributed: {type(conv).__name__} passed its own size to propagate; on a "
                             f"part the sizes are (inner + halo rows, inner rows)")
        adj_t = _fused(conv, norms, edge_index, kwargs) if hook == "message" else None
        if adj_t is not None:
            return adj_t, None, kwargs
        kwargs = {k: norms.mapped[id(v)][1](v) if id(v) in norms.mapped and norms.mapped[id(v)][0] is v else v
                  for k, v in kwargs.items()}  # a deferred lin(X) that no fused product reads: mapped here
        src_reads, _ = _reads(type(conv), hook)
        dim, out, done = conv.node_dim, dict(kwargs), {}
        for key in src_reads:
            value = kwargs.get(key)
            src, dst = value if isinstance(value, (tuple, list)) else (value, value)
            if not isinstance(src, torch.Tensor):
                continue
            if src.size(dim) != graph.num_inner:
                raise ValueError(f"gd.nn.Distributed: {type(conv).__name__} propagates '{key}' with {src.size(dim)} "
                                 f"rows along dim {dim}, but this part has {graph.num_inner} inner rows")
            if id(src) not in done:
                rows = src if dim % src.dim() == 0 else src.movedim(dim, 0)  # (the same object: the input cache)
                halo, fetch = start_fetch(graph, conv, rows)
                halo = fetch.halo() if fetch is not None else halo
                done[id(src)] = src if halo is None else torch.cat([src, halo.movedim(0, dim)], dim)
            out[key] = (done[id(src)], dst)
        return edge_index, (graph.num_src, graph.num_inner), out

    return pre


def _pygs_own(cls: type) -> list[tuple]:
    """(module, name, function) for each of PyG's gcn_norm, get_laplacian and spmm that a module of the conv's
    classes reads by name: what the call swaps (a module's own function of that name stays)."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import get_laplacian, spmm

    pygs = {"gcn_norm": gcn_norm, "get_laplacian": get_laplacian, "spmm": spmm}
    names = dict.fromkeys(c.__module__ for c in cls.__mro__)  # (in order: the same on every rank)
    return [(sys.modules[m], name, fn) for m in names if m in sys.modules for name, fn in pygs.items()
            if getattr(sys.modules[m], name, None) is fn]


@contextlib.contextmanager
def _on_part(conv, cls: type, graph: LocalGraph, norms: PartNorms):
    """Within: the conv's propagate and edge_updater see pairs, its module part-aware norms, and ChebConv /
    SuperGATConv their part's lambda_max / positive samples."""
    handles = [conv.register_propagate_forward_pre_hook(_pair_hook(graph, "message", norms)),
               *_input_cache_through_lin(conv, cls, graph, norms)]
    if hasattr(conv, "register_edge_update_forward_pre_hook"):
        handles.append(conv.register_edge_update_forward_pre_hook(_pair_hook(graph, "edge_update", norms)))
    swapped = _pygs_own(cls)
    for m, name, fn in swapped:
        if name == "spmm":
            norms.original_spmm = fn
        setattr(m, name, getattr(norms, name))
    own = _instance_overrides(conv, cls, graph, norms)
    conv.__dict__.update(own)
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        for m, name, fn in swapped:
            setattr(m, name, fn)
        for name in own:
            conv.__dict__.pop(name, None)


def _instance_overrides(conv, cls: type, graph: LocalGraph, norms: PartNorms) -> dict:
    """Methods a conv calls on itself that read the whole graph, replaced for the call."""
    own = {}
    if hasattr(cls, "__norm__") and "lambda_max" in inspect.signature(cls.forward).parameters:  # ChebConv
        def cheb_norm(edge_index, num_nodes, edge_weight, normalization, lambda_max=None, dtype=None, batch=None):
            if lambda_max is None:
                lambda_max = norms.lambda_max(edge_index, edge_weight, normalization, dtype)
            return cls.__norm__(conv, edge_index, num_nodes, edge_weight, normalization, lambda_max, dtype, batch)
        own["__norm__"] = cheb_norm
    if hasattr(cls, "positive_sampling") and hasattr(cls, "negative_sampling"):  # SuperGATConv's attention loss
        inner = lambda e: e[:, e[0] < graph.num_inner]  # sampled among this rank's rows (it samples at random)
        own["positive_sampling"] = lambda e: cls.positive_sampling(conv, inner(e))
        own["negative_sampling"] = lambda e, n, batch=None: cls.negative_sampling(conv, inner(e), n, batch)
    return own


CACHES = ("_cached_edge_index", "_cached_adj_t", "_cached_x", "_cached_h")  # PyG convs' cached=True state


def run_on_part(conv, cls: type, bound: dict, graph_name: str, graph: LocalGraph):
    """`cls.forward` on the part: `bound` (the call bound to its signature, self removed) with the part's
    in-edges where the graph went. The conv's own caches (`cached=True`) hold the part's version during the
    call and the plain call's outside it: a conv may be called both ways."""
    edges = local_edge_index(graph)
    bound[graph_name] = edges
    held = [k for k in CACHES if k in conv.__dict__]
    plain = {k: conv.__dict__[k] for k in held}
    resets = conv.__dict__.get("_gd_resets", 0)  # (reset_parameters drops the part's caches, as PyG's own)
    entry = graph.cache(("pyg-conv-caches", id(conv)), lambda: [weakref.ref(conv), {}, resets])
    if entry[0]() is not conv or entry[2] != resets:  # another conv's (it lived at this address), or reset since
        entry[:] = [weakref.ref(conv), {}, resets]
    part = entry[1]
    conv.__dict__.update({k: part.get(k) for k in held})
    try:
        with _on_part(conv, cls, graph, PartNorms(graph, edges)):
            return cls.forward(conv, **bound)
    except IndexError as e:
        raise IndexError(f"gd.nn.Distributed({cls.__name__}): its forward raised IndexError ({e}); if it reads "
                         f"per-node values at its edges outside propagate (e.g. degree(col)[row]), that cannot run on "
                         f"a part, whose sources include halo rows: read them in message() as <name>_j "
                         f"(docs/layers.md)") from e
    finally:
        part.update({k: conv.__dict__.get(k) for k in held})
        conv.__dict__.update(plain)
