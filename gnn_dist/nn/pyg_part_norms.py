"""The part's versions of what PyG computes from the whole graph's degrees, and gnn-dist's product in
place of PyG's weighted-sum propagate (`gnn_dist.nn.pyg_propagate` swaps them in for a conv's call).

- `gcn_norm`: a destination's degree is the sum over its in-edges, all of which
  an inner row holds; a halo row's comes from its owner (an exact exchange,
  autograd-tracked, since PDNConv learns its edge weights; cached per graph
  where the weights are the conv's default of ones);
- `get_laplacian` (ChebConv): degrees sum over the source column, so every
  rank sums what it holds, sends the halo rows' partial sums home and fetches
  the totals back; ChebConv's default `lambda_max` is the maximum over ranks;
- `spmm`: a propagate that is PyG's own weighted sum over fixed weights runs as
  `HaloSpMM` (the central rows computed while the halo travels);
- `degree_histogram`: PNAConv's histogram over every rank's rows.
"""
from __future__ import annotations

import functools
import inspect
import warnings

import torch
import torch.distributed as dist

from gnn_dist.graph.local import LocalGraph, SplitOperator
from gnn_dist.nn.dropout import input_dropout
from gnn_dist.nn.message_passing import HaloSpMM, ProvidedSpMM, exchange_channel, provided_halo
from gnn_dist.runtime import staging
from gnn_dist.runtime.halo_fetch import fetch_halo


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
def fusable(cls: type) -> bool:
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
