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
by itself, so within the call the conv's module sees part-aware versions:

- `gcn_norm`: a destination's degree is the sum over its in-edges, all of which
  an inner row holds; a halo row's comes from its owner (an exact exchange,
  autograd-tracked, since PDNConv learns its edge weights; cached per graph
  where the weights are the conv's default of ones);
- `get_laplacian` (ChebConv): degrees sum over the source column, so every
  rank sums what it holds, sends the halo rows' partial sums home and fetches
  the totals back; ChebConv's default `lambda_max` is the maximum over ranks.

The conv's own caches (GCNConv's `_cached_edge_index`, SGConv's `_cached_x`)
then hold the part's version.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
import weakref

import torch
import torch.distributed as dist

from gnn_dist.graph.local import LocalGraph, SplitOperator
from gnn_dist.nn.dropout import input_dropout
from gnn_dist.nn.message_passing import HaloSpMM, ProvidedSpMM, exchange_channel, provided_halo
from gnn_dist.runtime import staging
from gnn_dist.runtime.halo_fetch import HaloFetch, fetch_halo


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


def _halo_rows(graph: LocalGraph, v: torch.Tensor) -> torch.Tensor:
    """The halo rows of a per-inner-row vector, exact (no codec, no training state), autograd-tracked."""
    if graph.exchange is None:
        return v[:0]
    return fetch_halo(v.view(-1, 1), graph.exchange, None).view(-1)


def _sum_home(graph: LocalGraph, partial: torch.Tensor) -> torch.Tensor:
    """Per inner row, the sum over every rank of `partial` (one value per part-local row): halo rows' partial
    sums go to their owners, as gradients do."""
    n, ex = graph.num_inner, graph.exchange
    inner = partial[:n].clone()
    if ex is None:
        return inner
    pending = ex.start_backward(partial[n:].detach().view(-1, 1).contiguous(), None)
    return ex.scatter_back(inner.view(-1, 1), pending).view(-1)


def _split_operator(graph: LocalGraph, edge_index: torch.Tensor, weight: torch.Tensor | None) -> tuple:
    """(adj_t [inner, inner + halo] as torch CSR, its SplitOperator): rows are destinations, as PyG's adj_t."""
    import numpy as np
    import scipy.sparse as sp

    src, dst = edge_index.cpu().numpy()
    w = np.ones(src.shape[0], np.float32) if weight is None else weight.detach().cpu().numpy().astype(np.float32)
    m = sp.csr_matrix((w, (dst, src)), shape=(graph.num_inner, graph.num_src))
    nc, n = graph.num_central, graph.num_inner  # (central rows read inner columns only)
    op = SplitOperator.from_scipy(m[:nc, :n], m[nc:], n, graph.device)
    with warnings.catch_warnings():  # torch flags CSR as beta on every construction
        warnings.simplefilter("ignore", UserWarning)
        adj_t = torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)), torch.from_numpy(
            m.indices.astype(np.int64)), torch.from_numpy(m.data), size=m.shape, device=graph.device)
    return adj_t, op


@functools.lru_cache(maxsize=None)
def _fusable(cls: type) -> bool:
    """Is the conv's propagate PyG's own weighted sum, `edge_weight * x_j` summed, with message_and_aggregate
    its `spmm(adj_t, x)` (GCNConv, SGConv, APPNP, TAGConv, GCN2Conv, ...)? Then gnn-dist's own product computes
    it. Only PyG's own methods qualify: a subclass that changes message, aggregate or update does not."""
    from torch_geometric.nn.conv import MessagePassing as PyGMessagePassing

    own = lambda name: getattr(getattr(cls, name), "__module__", "").startswith("torch_geometric.nn.conv.")
    if not (own("message") and own("message_and_aggregate") and cls.aggregate is PyGMessagePassing.aggregate
            and cls.update is PyGMessagePassing.update):
        return False
    try:
        fused = inspect.getsource(cls.message_and_aggregate).strip().splitlines()[-1].strip()
        message = inspect.getsource(cls.message)
    except (OSError, TypeError):
        return False
    return fused == "return spmm(adj_t, x, reduce=self.aggr)" and "edge_weight.view(-1, 1) * x_j" in message


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


def _input_cache_through_lin(conv, cls: type, graph: LocalGraph, norms: "PartNorms") -> list:
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


class PartNorms:
    """`gcn_norm`, `get_laplacian` and `spmm` as PyG computes them on the whole graph, on one part's in-edges."""

    def __init__(self, graph: LocalGraph, edges: torch.Tensor):
        self.graph, self.edges = graph, edges
        self.fused: dict = {}  # id(adj_t) -> (conv, SplitOperator), for this call's fused propagates
        self.mapped: dict = {}  # id(X) -> (X, lin's map): input features whose lin(X) is deferred (GCNConv)
        self.original_spmm = None

    def _check(self, edge_index, num_nodes, what: str) -> None:
        if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided:
            raise TypeError(f"gd.nn.Distributed: {what} got a sparse adjacency; on a part it takes edge_index")
        if num_nodes is not None and num_nodes != self.graph.num_inner:
            raise ValueError(f"gd.nn.Distributed: {what} was asked for {num_nodes} nodes but this part has "
                             f"{self.graph.num_inner} inner rows (node inputs hold inner rows only)")

    def gcn_norm(self, edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True,
                 flow="source_to_target", dtype=None):
        """PyG's gcn_norm: w_ij / sqrt(d_i d_j) over edges with the remaining self loops, d = in-weight."""
        self._check(edge_index, num_nodes, "gcn_norm")
        if flow != "source_to_target":
            raise ValueError("gd.nn.Distributed: gcn_norm with flow='target_to_source' reads out-edges, which a "
                             "part does not hold")
        if edge_weight is None and edge_index is self.edges:  # the same every call: one exchange per graph
            key = ("pyg-gcn-norm", bool(improved), bool(add_self_loops), dtype)
            made = self.graph.cache(key, lambda: self._gcn(edge_index, None, improved, add_self_loops, dtype))
            self._made()[id(made[1])] = made
            return made
        return self._gcn(edge_index, edge_weight, improved, add_self_loops, dtype)

    def _made(self) -> dict:
        """id(weights) -> (edge_index, weights) of this graph's cached normalisations: fixed, so fusable."""
        return self.graph.cache(("pyg-normalised",), dict)

    def operator(self, edge_index, edge_weight) -> tuple | None:
        """(adj_t, SplitOperator) of fixed edges and weights (the part's edges, or a cached normalisation of
        them), made once per graph; None for weights made per call (learned, or the user's)."""
        made = self._made().get(id(edge_weight)) if edge_weight is not None else None
        if not ((edge_index is self.edges and edge_weight is None)
                or (made is not None and made[0] is edge_index and made[1] is edge_weight)):
            return None
        return self.graph.cache(("pyg-operator", id(edge_index), id(edge_weight)),
                                lambda: _split_operator(self.graph, edge_index, edge_weight))

    def spmm(self, src, other, reduce: str = "sum"):
        """PyG's spmm, but a fused propagate's adj_t (`_pair_hook`) runs gnn-dist's own product: the halo
        fetched with the central rows computed meanwhile, the numba kernel, backward's exchange overlapped."""
        op = self.fused.get(id(src))
        if op is None:
            return self.original_spmm(src, other, reduce=reduce)
        conv, op = op
        mapped = self.mapped.get(id(other))
        if mapped is not None and mapped[0] is other:  # A (X W) as (A X) W: X's halo is the input cache's
            return mapped[1](ProvidedSpMM.apply(other, self.graph.exchange.static_halo(other), op))
        held = provided_halo(self.graph, other)
        if held is not None:
            return ProvidedSpMM.apply(other, held, op)
        if self.graph.is_input(other):  # the input features: their halo is fetched once (the input cache)
            input_dropout(other, self.graph, 0.0, False)
        return HaloSpMM.apply(other, op, self.graph, exchange_channel(self.graph, conv))

    def _gcn(self, edge_index, edge_weight, improved, add_self_loops, dtype):
        from torch_geometric.utils import add_remaining_self_loops, scatter

        n = self.graph.num_inner
        if add_self_loops:
            edge_index, edge_weight = add_remaining_self_loops(edge_index, edge_weight, 2.0 if improved else 1.0, n)
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        row, col = edge_index[0], edge_index[1]
        deg = scatter(edge_weight, col, 0, dim_size=n, reduce="sum")
        dinv = torch.cat([deg, _halo_rows(self.graph, deg)]).pow(-0.5)
        dinv = dinv.masked_fill(dinv == float("inf"), 0)
        return edge_index, dinv[row] * edge_weight * dinv[col]

    def get_laplacian(self, edge_index, edge_weight=None, normalization=None, dtype=None, num_nodes=None):
        """PyG's get_laplacian: degrees sum over the source column, i.e. over every rank's edges."""
        from torch_geometric.utils import add_self_loops, remove_self_loops, scatter

        self._check(edge_index, num_nodes, "get_laplacian")
        n = self.graph.num_inner
        edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
        if edge_weight.requires_grad:
            raise ValueError("gd.nn.Distributed: get_laplacian with edge weights that need gradients: its degrees sum "
                             "over every rank's edges, which this version does without autograd; detach the weights")
        row, col = edge_index[0], edge_index[1]
        with torch.no_grad():  # (degrees from fixed weights)
            inner = _sum_home(self.graph, scatter(edge_weight.detach(), row, 0, dim_size=self.graph.num_src))
            deg = torch.cat([inner, _halo_rows(self.graph, inner)])
        if normalization is None:
            edge_index, _ = add_self_loops(edge_index, num_nodes=n)
            return edge_index, torch.cat([-edge_weight, deg[:n]], dim=0)
        if normalization == "sym":
            dinv = deg.pow(-0.5).masked_fill(deg == 0, 0)
            edge_weight = dinv[row] * edge_weight * dinv[col]
        else:  # "rw"
            edge_weight = deg.reciprocal().masked_fill(deg == 0, 0)[row] * edge_weight
        return add_self_loops(edge_index, -edge_weight, fill_value=1.0, num_nodes=n)

    def lambda_max(self, edge_index, edge_weight, normalization, dtype) -> torch.Tensor:
        """ChebConv's default lambda_max, 2 max(L), over every rank's part of L."""
        _, lap = self.get_laplacian(edge_index, edge_weight, normalization, dtype, self.graph.num_inner)
        peak = lap.detach().max() if lap.numel() else lap.new_full((), float("-inf"))
        ex = self.graph.exchange
        if ex is not None:
            peak = staging.all_reduce(peak.clone(), op=dist.ReduceOp.MAX, group=ex.wire.group)
        return 2.0 * peak


def _fused(conv, norms: PartNorms, edge_index, kwargs: dict):
    """adj_t for a propagate that gnn-dist's own product can run (`PartNorms.spmm`), else None."""
    x, w = kwargs.get("x"), kwargs.get("edge_weight")
    if not (_fusable(type(conv)) and set(kwargs) <= {"x", "edge_weight"} and isinstance(x, torch.Tensor)
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


def degree_histogram(graph: LocalGraph) -> torch.Tensor:
    """PNAConv's `deg`: how many nodes of the whole graph have each in-degree (PyG's `degree` of the
    destinations, binned). Collective on a part: every rank calls it and gets the same histogram."""
    deg = torch.from_numpy(graph.in_degree[: graph.num_inner].astype("int64")).to(graph.device)
    group = graph.exchange.wire.group if graph.exchange is not None else None
    top = deg.max().reshape(1) if deg.numel() else deg.new_zeros(1)
    if graph.exchange is not None:
        top = staging.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    hist = torch.bincount(deg, minlength=int(top) + 1)
    if graph.exchange is not None:
        hist = staging.all_reduce(hist, group=group)
    return hist
