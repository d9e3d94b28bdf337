"""Node -> part assignment: METIS (through pymetis), Mt-KaHyPar and KaHIP (optional), streaming, baselines."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from partition.errors import DataError, UsageError
from partition.graph import Graph
from partition.rebalance import rebalance

BALANCE_KEYS = ("train", "degree", "types")
BALANCE_TOLERANCE = 0.05  # every constraint's heaviest part within 5% of the mean
WEIGHTED = ("metis", "mtkahypar", "kahip")  # methods that take node weights, balance constraints, edge weights


def undirected_adjacency(graph: Graph, edge_weight: np.ndarray | None = None) -> sp.csr_matrix:
    """Symmetric, loop-free adjacency: METIS partitions undirected graphs only.

    Entries hold how many directed edges (or how much weight) join a pair, so a
    pair linked both ways counts twice, as it costs twice in the halo. Without
    weights it is kept on the graph: the default partition's candidates, their
    swaps and --refine each ask for it (0.17 s a call on a million edges).
    """
    if edge_weight is None:
        kept = graph.__dict__.get("_undirected")
        if kept is None or kept[0] != (graph.num_nodes, graph.num_edges):
            graph.__dict__["_undirected"] = ((graph.num_nodes, graph.num_edges), _undirected(graph, None))
        return graph.__dict__["_undirected"][1]
    return _undirected(graph, edge_weight)


def _undirected(graph: Graph, edge_weight: np.ndarray | None) -> sp.csr_matrix:
    n = graph.num_nodes
    src, dst = graph.edge_index()
    w = np.ones(src.shape[0], dtype=np.int64) if edge_weight is None else np.asarray(edge_weight)
    a = sp.coo_matrix((w, (dst, src)), shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    a.setdiag(0)
    a.eliminate_zeros()
    a.sort_indices()
    return a


def constraint_columns(graph: Graph, balance: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Names and columns of every balance constraint: node count first, then each requested key.

    "types" is one column per node type (typed graphs); "degree" weighs a node by in + out edges + 1.
    """
    names, cols = ["nodes"], [np.ones(graph.num_nodes, dtype=np.int64)]
    for key in balance:
        if key == "train":
            names.append("train")
            cols.append(graph.train_mask.astype(np.int64))
        elif key == "degree":
            names.append("degree")
            cols.append(graph.in_degree() + graph.out_degree() + 1)
        elif key == "types":
            if graph.node_type is None:
                raise UsageError("--balance types applies to typed graphs (hsbm:, hfile:)")
            for t in range(int(graph.node_type.max()) + 1):
                names.append(f"type {t}")
                cols.append((graph.node_type == t).astype(np.int64))
        else:
            raise UsageError(f"unknown balance key '{key}' (choose from {', '.join(BALANCE_KEYS)})")
    return names, np.stack(cols, axis=1)


def vertex_weights(graph: Graph, balance: Sequence[str]) -> np.ndarray | None:
    """The constraint columns, or None when node count is the only one."""
    cols = constraint_columns(graph, balance)[1]
    return cols if cols.shape[1] > 1 else None


def constraint_balance(graph: Graph, parts: np.ndarray, num_parts: int, balance: Sequence[str],
                       type_names: Sequence[str] | None = None) -> dict[str, float]:
    """Max over mean of every constraint's per-part load: what `--balance` promised, measured."""
    names, cols = constraint_columns(graph, balance)
    if type_names is not None:
        names = [f"type {type_names[int(n[5:])]}" if n.startswith("type ") else n for n in names]
    out = {}
    for name, w in zip(names, cols.T):
        load = np.bincount(parts, weights=w, minlength=num_parts)
        out[name] = float(load.max() / load.mean()) if load.mean() > 0 else 1.0
    return out


def unmet(constraints: dict[str, float]) -> list[str]:
    """One phrase per constraint beyond the tolerance, naming it and by how much."""
    return [f"{name} at {v:.3f}x the mean (target {1 + BALANCE_TOLERANCE:.2f})"
            for name, v in constraints.items() if v > 1 + BALANCE_TOLERANCE + 1e-9]


def balanced_run(graph: Graph, num_parts: int, run, balance: Sequence[str] = (), vweights: np.ndarray | None = None,
                 edge_weight: np.ndarray | None = None) -> np.ndarray:
    """Run a partitioner `run(adj, node_weights)` under the balance constraints every weighted method shares.

    The partitioner balances the first constraint column only (node counts):
    METIS and the backends take one weight per node, and giving them the row
    sum of several columns balanced that sum while node counts drifted (2.7x
    the mean on an R-MAT graph balanced for degree). `rebalance` then brings
    each further column within 5% by swaps, which keep every part's count.
    """
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int32)
    adj = undirected_adjacency(graph, edge_weight)
    vw = vweights if vweights is not None else vertex_weights(graph, balance)
    first = None if vw is None or (vw[:, 0] == 1).all() else np.ascontiguousarray(vw[:, 0], dtype=np.int64)
    parts = np.asarray(run(adj, first), dtype=np.int32)
    if vw is not None and vw.shape[1] > 1:
        parts = rebalance(adj, parts, vw[:, 1:], num_parts).astype(np.int32)
    return parts


def metis_parts(
    graph: Graph,
    num_parts: int,
    seed: int = 0,
    balance: Sequence[str] = (),
    objective: str = "cut",
    edge_weight: np.ndarray | None = None,
    vweights: np.ndarray | None = None,
) -> np.ndarray:
    """METIS k-way; `objective="vol"` minimises total communication volume instead of edge cut."""
    import pymetis

    if objective not in ("cut", "vol"):
        raise UsageError(f"unknown METIS objective '{objective}' (choose cut or vol)")

    def run(adj: sp.csr_matrix, node_weights: np.ndarray | None) -> np.ndarray:
        opts = pymetis.Options(seed=int(seed))
        if objective == "vol":
            opts.objtype = int(pymetis.ObjType.VOL)
        _, parts = pymetis.part_graph(
            num_parts,
            adjacency=pymetis.CSRAdjacency(adj.indptr.astype(np.int64), adj.indices.astype(np.int64)),
            vweights=node_weights,
            eweights=None if edge_weight is None else np.maximum(adj.data, 1).astype(np.int64),
            options=opts,
            recursive=False,  # k-way: the only METIS mode that supports the volume objective
        )
        return parts

    return balanced_run(graph, num_parts, run, balance, vweights, edge_weight)


def mtkahypar_parts(graph: Graph, num_parts: int, seed: int = 0, balance: Sequence[str] = (), objective: str = "cut",
                    edge_weight: np.ndarray | None = None, vweights: np.ndarray | None = None,
                    deterministic: bool = True) -> np.ndarray:
    """Mt-KaHyPar: edge cut, or (`objective="vol"`) halo rows exactly, as hypergraph connectivity; its
    deterministic preset unless `deterministic=False` (faster, but its threads race)."""
    from partition.backends import mtkahypar_parts as run_mtkahypar

    return balanced_run(graph, num_parts, lambda adj, nw: run_mtkahypar(graph, adj, num_parts, nw, seed, objective,
                                                                        deterministic=deterministic),
                        balance, vweights, edge_weight)


def kahip_parts(graph: Graph, num_parts: int, seed: int = 0, balance: Sequence[str] = (), mode: str = "eco",
                edge_weight: np.ndarray | None = None, vweights: np.ndarray | None = None, **_: object) -> np.ndarray:
    """KaHIP's kaffpa (edge cut) in its fast, eco or strong configuration."""
    from partition.backends import kahip_parts as run_kahip

    return balanced_run(graph, num_parts, lambda adj, nw: run_kahip(adj, num_parts, nw, seed, mode),
                        balance, vweights, edge_weight)


def random_parts(graph: Graph, num_parts: int, seed: int = 0, **_: object) -> np.ndarray:
    """Balanced random assignment: the baseline every locality-aware method must beat."""
    rng = np.random.default_rng([seed, 0x9A27])  # its own stream: generators seeded alike must not align with it
    parts = np.arange(graph.num_nodes, dtype=np.int64) % num_parts
    return rng.permutation(parts).astype(np.int32)


def contiguous_parts(graph: Graph, num_parts: int, **_: object) -> np.ndarray:
    """Equal ranges of node ids: free, and good when ids already follow locality."""
    bounds = np.linspace(0, graph.num_nodes, num_parts + 1).astype(np.int64)
    return (np.searchsorted(bounds, np.arange(graph.num_nodes), side="right") - 1).astype(np.int32)


def streaming_parts(graph: Graph, num_parts: int, seed: int = 0, method: str = "fennel", passes: int = 1,
                    order: str = "bfs", **_: object) -> np.ndarray:
    """LDG / Fennel in one (or a few) streaming passes: for graphs too big for METIS's memory."""
    from partition.streaming import stream_parts

    return stream_parts(undirected_adjacency(graph), num_parts, method, seed=seed, passes=passes, order=order)


METHODS: dict[str, Callable[..., np.ndarray]] = {
    "metis": metis_parts,
    "mtkahypar": mtkahypar_parts,
    "kahip": kahip_parts,
    "random": random_parts,
    "contiguous": contiguous_parts,
    "ldg": lambda g, k, **kw: streaming_parts(g, k, method="ldg", **kw),
    "fennel": lambda g, k, **kw: streaming_parts(g, k, method="fennel", **kw),
}


def assign_parts(graph: Graph, num_parts: int, method: str = "metis", **kwargs: object) -> np.ndarray:
    """Dispatch by name after the checks every method shares."""
    if method not in METHODS:
        raise UsageError(f"unknown partition method '{method}' (choose from {', '.join(METHODS)})")
    if num_parts < 1 or num_parts > graph.num_nodes:
        raise UsageError(f"--parts must be between 1 and the number of nodes ({graph.num_nodes}), got {num_parts}")
    parts = METHODS[method](graph, num_parts, **kwargs)
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise DataError(f"method {method} left part {int(np.argmin(counts))} empty; use fewer parts")
    return parts


def read_assignment(path: str, num_nodes: int, num_parts: int) -> np.ndarray:
    """A node -> part array saved by `gnn-dist assign` (or any tool), checked against the graph it will split."""
    try:
        parts = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"assignment {path} cannot be read: {str(e).splitlines()[0]}") from None
    if parts.ndim != 1 or not np.issubdtype(parts.dtype, np.integer):
        raise DataError(f"assignment {path}: expected a 1-D integer array, got {parts.dtype} {parts.shape}")
    if parts.shape[0] != num_nodes:
        raise DataError(f"assignment {path} has {parts.shape[0]} entries but the graph has {num_nodes} nodes")
    if parts.size and (parts.min() < 0 or parts.max() >= num_parts):
        raise UsageError(f"assignment {path}: part ids must be in [0, {num_parts}), found "
                             f"{int(parts.min())}..{int(parts.max())}")
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise DataError(f"assignment {path} leaves part {int(np.argmin(counts))} empty")
    return parts.astype(np.int32)
