"""LocalGraph: one part as torch tensors, or a whole graph in one process (docs/design.md §2).

Layers see only this object. A single-process graph is a LocalGraph with no
halo and no exchange, so a layer runs unchanged on both. Sparse operators
(normalised adjacency split into central and marginal rows, with transposes
for backward) are derived once and cached here.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from gnn_dist.runtime import kernels, tuning
from gnn_dist.runtime.exchange import HaloExchange
from gnn_dist.runtime.malloc import release_free_memory
from partition.book import PartitionBook
from partition.build import PartPlan, build_parts
from partition.errors import DataError
from partition.graph import Graph


def spmm(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None = None, add: bool = False) -> torch.Tensor:
    """a @ x for a sparse CSR `a`, also when `a` has no rows or no columns (torch's CSR kernels refuse those).

    With `out` (a block of rows of a larger result), the product is written there, or added to it with
    `add`: the split operator's row blocks then land in one result, without a concatenated copy or a
    temporary sum, each as large as the layer's output.
    """
    if out is None:
        if a.shape[0] == 0 or a.shape[1] == 0:
            return x.new_zeros((a.shape[0],) + tuple(x.shape[1:]))
        if _in_numba(a, x):
            out = x.new_empty((a.shape[0],) + tuple(x.shape[1:]))
            return _numba_spmm(a, x, out, False)
        return a @ x
    if a.shape[0] == 0 or a.shape[1] == 0:
        return out if add else out.zero_()
    if _in_numba(a, x) and out.is_contiguous():
        return _numba_spmm(a, x, out, add)
    return out.addmm_(a, x) if add else torch.mm(a, x, out=out)


def _in_numba(a: torch.Tensor, x: torch.Tensor) -> bool:
    """The numba row kernel takes CPU float32 products large enough to repay loading numba."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and a.layout == torch.sparse_csr
            and a.values().dtype == torch.float32 and x.shape[0] > 0
            and a._nnz() * (x.numel() // x.shape[0]) >= tuning.NUMBA_MIN_SPMM_MULTIPLY_ADDS and kernels.available())


def _numba_spmm(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor, add: bool) -> torch.Tensor:
    x2 = x.detach().reshape(x.shape[0], -1).contiguous().numpy()
    out2 = out.detach().view(out.shape[0], -1).numpy()
    kernels.in_ranges(kernels.load().csr_rows_into, a.shape[0], a.crow_indices().numpy(), a.col_indices().numpy(),
                      a.values().numpy(), x2, out2, add)
    return out


@dataclass
class SplitOperator:
    """A = [A_central; A_marginal], with A_marginal = [local columns | halo columns], and transposes.

    Central rows read inner columns only; so do the local columns of marginal
    rows. Both are computed while halo rows are in flight: only the halo
    columns wait for the exchange (and, backward, only the halo columns'
    gradients are computed before it starts).
    """

    central: torch.Tensor  # CSR [num_central, num_inner]
    central_t: torch.Tensor
    local: torch.Tensor  # CSR [num_marginal, num_inner]: marginal rows, inner columns
    local_t: torch.Tensor
    halo: torch.Tensor  # CSR [num_marginal, num_halo]: marginal rows, halo columns
    halo_t: torch.Tensor

    @classmethod
    def from_scipy(cls, central: sp.csr_matrix, marginal: sp.csr_matrix, num_inner: int, device) -> "SplitOperator":
        local, halo = marginal[:, :num_inner].tocsr(), marginal[:, num_inner:].tocsr()
        return cls(*(_to_torch_csr(t, device) for t in (central, central.T.tocsr(), local, local.T.tocsr(),
                                                          halo, halo.T.tocsr())))

    @property
    def num_central(self) -> int:
        return int(self.central.shape[0])

    @property
    def num_marginal(self) -> int:
        return int(self.local.shape[0])


def _to_torch_csr(m: sp.csr_matrix, device) -> torch.Tensor:
    m = m.tocsr()
    m.sort_indices()
    with warnings.catch_warnings():  # torch flags CSR as beta on every construction
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)), torch.from_numpy(m.indices.astype(np.int64)),
            torch.from_numpy(m.data.astype(np.float32)), size=m.shape, device=device, check_invariants=False)


@dataclass
class LocalGraph:
    """A part's topology and exchange plan: its rows, edges, global degrees and halo exchange.

    A graph holds no node data: a part's features, labels and split are a `PartData`, which a `LocalPart`
    (what `load_partition` returns) carries beside its graph. A snapshot's graph and a group of snapshots
    are plain graphs, whose features come from the sequence; a typed graph's relation views are parts
    that share their part's data.
    """

    indptr: np.ndarray  # [num_inner + 1], rows = inner destinations
    indices: np.ndarray  # local source ids, < num_src
    edge_weight: np.ndarray | None
    num_inner: int
    num_central: int
    num_src: int
    in_degree: np.ndarray  # global counts, every local row
    in_weight: np.ndarray  # global weighted in-degree, every local row
    global_ids: np.ndarray
    exchange: HaloExchange | None = None
    overlap: bool = True
    device: torch.device = torch.device("cpu")
    part: int = 0
    num_parts: int = 1
    self_loop: np.ndarray | None = None  # bool, every local row: has a self loop in the global graph
    types: object = None  # gnn_dist.graph.typed.Types for a typed part
    edge_attr: np.ndarray | None = None  # float32 [E_local, D] edge features, CSR order
    book: PartitionBook | None = None  # the partition's id mappings (global_ids above is its row list for this part)
    _ops: dict = field(default_factory=dict, repr=False)
    _edges: dict = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------ building
    @classmethod
    def from_plan(cls, plan: PartPlan, num_classes: int, num_parts: int, exchange: HaloExchange | None,
                  device: torch.device = torch.device("cpu"), overlap: bool = True) -> "LocalPart":
        """A part from its plan (read from a partition, or built in memory), with its node data."""
        return LocalPart(
            indptr=plan.indptr, indices=plan.indices, edge_weight=plan.edge_weight,
            num_inner=plan.num_inner, num_central=plan.num_central, num_src=int(plan.global_ids.shape[0]),
            in_degree=plan.in_degree, in_weight=plan.in_weight, global_ids=plan.global_ids,
            exchange=exchange, overlap=overlap, device=device, part=plan.part, num_parts=num_parts,
            self_loop=plan.self_loop, edge_attr=plan.edge_attr, data=PartData.from_plan(plan, num_classes, device))

    @classmethod
    def from_graph(cls, graph: Graph, device: torch.device = torch.device("cpu")) -> "LocalPart":
        """The whole graph in one process: every node inner and central, no exchange."""
        plan = next(build_parts(graph, np.zeros(graph.num_nodes, dtype=np.int32), 1))
        return cls.from_plan(plan, graph.num_classes, 1, None, device)

    @classmethod
    def from_pyg(cls, data, device: torch.device = torch.device("cpu")) -> "LocalPart":
        """A PyG `Data` object in one process (labels and masks optional)."""
        from gnn_dist.data.real import graph_from_pyg

        return cls.from_graph(graph_from_pyg(data), device)

    # ------------------------------------------------------------- derived
    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def global_id_tensor(self) -> torch.Tensor:
        """Global node id of every local row (inner, then halo), int64 on the graph's device."""
        if "global_ids" not in self._ops:
            self._ops["global_ids"] = torch.from_numpy(self.global_ids.astype(np.int64)).to(self.device)
        return self._ops["global_ids"]

    def is_input(self, x: torch.Tensor) -> bool:
        """Whether `x` is the part's input features, whose halo the input cache may hold: never for a graph
        without node data."""
        return False

    def _weights(self, weighted: bool) -> np.ndarray:
        """w per local edge: the graph's edge weight, or 1 (unweighted graph, or a layer that ignores weights)."""
        if weighted and self.edge_weight is not None:
            return self.edge_weight.astype(np.float64)
        return np.ones(self.num_edges, np.float64)

    def _rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_inner), np.diff(self.indptr))

    def _values(self, aggr: str, norm: str, weighted: bool) -> np.ndarray:
        """Coefficient of each local edge in the default message's aggregate (see MessagePassing)."""
        w, rows = self._weights(weighted), self._rows()
        if norm == "gcn":  # w_ij / sqrt(d_i d_j), d = loop + incoming w, global degrees
            dinv = 1.0 / np.sqrt(self._gcn_degree(weighted))
            return w * dinv[self.indices] * dinv[rows]
        if aggr == "mean":  # w_ij / (global in-degree count)
            return w / np.maximum(self.in_degree[: self.num_inner], 1)[rows]
        return w

    def _missing_loop(self) -> np.ndarray:
        """1 where GCN adds a unit self loop: nodes that have one keep theirs (PyG's add_remaining_self_loops)."""
        n = self.in_weight.shape[0]
        return np.ones(n) if self.self_loop is None else (~self.self_loop[:n]).astype(np.float64)

    def _gcn_degree(self, weighted: bool = True) -> np.ndarray:
        return (self.in_weight if weighted else self.in_degree.astype(np.float64)) + self._missing_loop()

    def operator(self, aggr: str = "sum", norm: str = "none", weighted: bool = True) -> SplitOperator:
        """The default message's aggregation as a sparse matrix, split at the central/marginal boundary.

        aggr "sum" or "mean", norm "none" or "gcn" (sum only; adds the remaining unit self loops).
        """
        key = (aggr, norm, weighted)
        if key not in self._ops:
            a = sp.csr_matrix((self._values(aggr, norm, weighted), self.indices, self.indptr),
                              shape=(self.num_inner, self.num_src))
            if norm == "gcn":
                diag = self._missing_loop()[: self.num_inner] / self._gcn_degree(weighted)[: self.num_inner]
                a = a + sp.csr_matrix((diag, (np.arange(self.num_inner), np.arange(self.num_inner))), shape=a.shape)
            self._ops[key] = SplitOperator.from_scipy(a[: self.num_central, : self.num_inner], a[self.num_central:],
                                                      self.num_inner, self.device)
            del a
            release_free_memory()  # the build's temporaries, kept on the heap otherwise
        return self._ops[key]

    def edges(self, loops: str = "keep", norm: str = "none", weighted: bool = True) -> dict:
        """Edge lists of central and marginal rows for per-edge messages, and the layer's edge order.

        "central" and "marginal": (dst row in block, src col, weight, features or None, position in the
        layer's edge order), destinations sorted. "edge_index": [2, E'] part-local (source, destination)
        in the layer's edge order; "inverse": block order -> layer order (`cat(blocks)[inverse]`).

        `loops`: "keep" the graph's edges; "replace" drops existing loops and adds one unit loop per
        inner node (PyG's remove + add_self_loops, GAT); "remaining" adds a unit loop where a node has
        none (PyG's add_remaining_self_loops, GCN). The layer's edge order is the stored edges' (CSR,
        `edge_attr`'s), less the dropped loops, then the added loops by row, as PyG appends them. Added
        loops get zero edge features. The weight is the raw w (1 if not `weighted`), or with norm "gcn"
        w_ij / sqrt(d_i d_j) (loops: 1 / d_i).
        """
        key = (loops, norm, weighted)
        if key not in self._edges:
            rows, cols = self._rows(), self.indices
            w = self._values("sum", "gcn", weighted) if norm == "gcn" else self._weights(weighted)
            attr = self.edge_attr
            order = np.arange(rows.shape[0])
            if loops != "keep":
                keep = cols != rows if loops == "replace" else np.ones(rows.shape[0], bool)
                loop = np.arange(self.num_inner) if loops == "replace" else \
                    np.flatnonzero(self._missing_loop()[: self.num_inner] > 0)
                loop_w = np.ones(loop.shape[0]) if norm != "gcn" else 1.0 / self._gcn_degree(weighted)[loop]
                rows = np.concatenate([rows[keep], loop])
                cols = np.concatenate([cols[keep], loop])
                w = np.concatenate([w[keep], loop_w])
                if attr is not None:
                    attr = np.concatenate([attr[keep], np.zeros((loop.shape[0], attr.shape[1]), np.float32)])
                order = np.argsort(rows, kind="stable")
            self._edges[key] = self._edge_blocks(rows, cols, w, attr, order)
            del rows, cols, w, attr, order
            release_free_memory()
        return self._edges[key]

    def _edge_blocks(self, rows: np.ndarray, cols: np.ndarray, w: np.ndarray, attr: np.ndarray | None,
                     order: np.ndarray) -> dict:
        """`edges()`'s dict from edges in the layer's order and `order`, the block order (destinations sorted)."""
        t = lambda a, dt=torch.int64: torch.from_numpy(np.ascontiguousarray(a)).to(self.device, dt)
        edge_index = t(np.stack([cols, rows]))
        rows, cols, w = rows[order], cols[order], w[order]
        attr = None if attr is None else attr[order]
        split = int(np.searchsorted(rows, self.num_central))
        a = (lambda lo, hi: None) if attr is None else (lambda lo, hi: t(attr[lo:hi], torch.float32))
        return {
            "central": (t(rows[:split]), t(cols[:split]), t(w[:split], torch.float32), a(0, split), t(order[:split])),
            "marginal": (t(rows[split:] - self.num_central), t(cols[split:]), t(w[split:], torch.float32),
                         a(split, rows.shape[0]), t(order[split:])),
            "edge_index": edge_index, "inverse": t(np.argsort(order)),
        }

    def cache(self, key: tuple, make):
        """`make()`, computed once per graph under `key`: what a layer derives from the topology (kept with
        the edge lists, which the memory report counts)."""
        if key not in self._edges:
            self._edges[key] = make()
        return self._edges[key]

    def edge_features(self) -> torch.Tensor:
        """The stored edge features `edge_attr` as a float32 tensor on the graph's device, in the stored
        edges' order (CSR by destination): what a layer's per-edge input is given in."""
        if self.edge_attr is None:
            raise DataError("this graph has no edge features (edge_attr): the data set gave none")
        return self.cache(("edge_features",), lambda: torch.from_numpy(self.edge_attr).to(self.device, torch.float32))


@dataclass
class PartData:
    """A part's node data, one row per inner node: features, labels and the train/val/test split."""

    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    num_classes: int

    @classmethod
    def from_plan(cls, plan: PartPlan, num_classes: int, device: torch.device) -> "PartData":
        """The node data of a part's plan, as tensors on `device` (features float32)."""
        t = lambda a: torch.from_numpy(a).to(device)
        return cls(x=t(np.array(plan.x, dtype=np.float32)), y=t(plan.y), train_mask=t(plan.train_mask),
                   val_mask=t(plan.val_mask), test_mask=t(plan.test_mask), num_classes=num_classes)


def _data_field(name: str) -> property:
    """A part's attribute that reads and replaces its `PartData`'s field of the same name."""
    return property(lambda self: getattr(self.data, name), lambda self, v: setattr(self.data, name, v),
                    doc=f"the part's `data.{name}`")


@dataclass
class LocalPart(LocalGraph):
    """A part as a rank trains on it: its graph (topology and exchange plan) and its node data.

    `x`, `y`, the masks and `num_classes` read the part's `PartData`, and assigning one (`part.x = ...`)
    replaces it there; the constructor takes them as `data=PartData(...)`.
    """

    data: PartData = field(kw_only=True)

    x = _data_field("x")
    y = _data_field("y")
    train_mask = _data_field("train_mask")
    val_mask = _data_field("val_mask")
    test_mask = _data_field("test_mask")
    num_classes = _data_field("num_classes")

    def __copy__(self) -> "LocalPart":
        """A shallow copy with data of its own: replacing the copy's `x` leaves this part's alone (as before
        the data had an object of its own). Relation views share their part's data on purpose."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.data = copy.copy(self.data)
        return new

    @property
    def num_features(self) -> int:
        return int(self.data.x.shape[1])

    def is_input(self, x: torch.Tensor) -> bool:
        return x is self.data.x

    def split(self) -> dict[str, np.ndarray]:
        """This part's share of the split, read back: {"train", "val", "test"} -> sorted global ids (int64) of
        its inner nodes in each set; a typed part gives its target type's own ids. The shares of all ranks
        make up the whole split, which `self.book.split()` (or `gnn-dist info DIR --export-split FILE`) gives
        as masks over every node."""
        inner = np.asarray(self.global_ids[: self.num_inner], np.int64)
        offset = 0
        if self.types is not None:  # ids of the target type: node types hold consecutive global id ranges
            t = self.types.node_types.index(self.types.target)
            ids = self.global_ids[self.types.node_type == t]  # one process (no book) holds the whole graph
            offset = self.book.type_range(t)[0] if self.book is not None else int(ids.min()) if ids.size else 0
        return {k: np.sort(inner[m.cpu().numpy()]) - offset
                for k, m in (("train", self.train_mask), ("val", self.val_mask), ("test", self.test_mask))}
