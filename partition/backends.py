"""Optional partitioners as backends: Mt-KaHyPar and KaHIP (pip extras `mtkahypar`, `kahip`).

Mt-KaHyPar (its deterministic preset unless asked otherwise) partitions either
the undirected graph (edge cut) or, with `objective="vol"`, the hypergraph
whose nets are {v} + out-neighbours(v):
a layer's exchange sends v's row once to every other part that holds one of
its out-neighbours, so the connectivity (lambda - 1) objective of these nets
is exactly the halo rows a partition costs. KaHIP's kaffpa minimises the
edge cut with its fast, eco or strong configuration.
"""
from __future__ import annotations

import importlib
import os

import numpy as np
import scipy.sparse as sp

from partition.errors import MissingExtraError, UsageError
from partition.graph import Graph

KAHIP_MODES = ("fast", "eco", "strong")
_MTK: dict = {}  # Mt-KaHyPar may be initialised once per process


def need(module: str) -> object:
    """Import an optional backend, or one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"--method {module}", module, module) from None


def _mtkahypar(threads: int | None):
    m = need("mtkahypar")
    if "init" not in _MTK:
        _MTK["init"] = m.initialize(threads or max(1, os.cpu_count() or 1), False)
    return m, _MTK["init"]


def out_neighbour_nets(graph: Graph) -> list[list[int]]:
    """One net per node with out-edges: the node and every node it sends to (self loops dropped)."""
    src, dst = graph.edge_index()
    keep = src != dst
    a = sp.csr_matrix((np.ones(int(keep.sum()), np.int8), (src[keep], dst[keep])),
                      shape=(graph.num_nodes, graph.num_nodes))
    a.sum_duplicates()
    nets = []
    for v in np.flatnonzero(np.diff(a.indptr)):
        nets.append([int(v)] + a.indices[a.indptr[v]:a.indptr[v + 1]].tolist())
    return nets


def mtkahypar_parts(graph: Graph, adj: sp.csr_matrix, num_parts: int, node_weights: np.ndarray | None, seed: int = 0,
                    objective: str = "cut", epsilon: float = 0.03, threads: int | None = None,
                    deterministic: bool = True) -> np.ndarray:
    """Mt-KaHyPar; `adj` is the symmetric adjacency (pair multiplicities as edge weights).

    Its default preset is seeded but not reproducible: its threads race, so the same seed may give a
    different partition in each run. The deterministic preset gives the same partition for a seed on any
    thread count (tests/test_partition_determinism.py); `deterministic=False` takes the default one.
    """
    m, mt = _mtkahypar(threads)
    ctx = mt.context_from_preset(m.PresetType.DETERMINISTIC if deterministic else m.PresetType.DEFAULT)
    ctx.logging = False
    m.set_seed(int(seed))
    n = graph.num_nodes
    nw = (node_weights if node_weights is not None else np.ones(n, np.int64)).astype(np.int64).tolist()
    if objective == "vol":
        ctx.set_partitioning_parameters(num_parts, epsilon, m.Objective.KM1)
        nets = out_neighbour_nets(graph)
        h = mt.create_hypergraph(ctx, n, len(nets), nets, nw, [1] * len(nets))
    elif objective == "cut":
        ctx.set_partitioning_parameters(num_parts, epsilon, m.Objective.CUT)
        upper = sp.triu(adj, k=1).tocoo()
        edges = np.stack([upper.row, upper.col], axis=1).tolist()
        h = mt.create_graph(ctx, n, len(edges), edges, nw, np.maximum(upper.data, 1).astype(np.int64).tolist())
    else:
        raise UsageError(f"unknown objective '{objective}' (choose cut or vol)")
    return np.asarray(h.partition(ctx).get_partition(), dtype=np.int32)


def kahip_parts(adj: sp.csr_matrix, num_parts: int, node_weights: np.ndarray | None, seed: int = 0,
                mode: str = "eco", epsilon: float = 0.03) -> np.ndarray:
    """KaHIP's kaffpa on the symmetric adjacency, in its fast, eco or strong configuration."""
    k = need("kahip")
    if mode not in KAHIP_MODES:
        raise UsageError(f"unknown KaHIP mode '{mode}' (choose from {', '.join(KAHIP_MODES)})")
    n = adj.shape[0]
    vw = (node_weights if node_weights is not None else np.ones(n, np.int64)).astype(np.int64).tolist()
    _, blocks = k.kaffpa(vw, adj.indptr.astype(np.int64).tolist(), np.maximum(adj.data, 1).astype(np.int64).tolist(),
                         adj.indices.astype(np.int64).tolist(), int(num_parts), float(epsilon), True, int(seed),
                         {"fast": k.FAST, "eco": k.ECO, "strong": k.STRONG}[mode])
    return np.asarray(blocks, dtype=np.int32)
