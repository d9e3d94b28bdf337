"""Partition a heterogeneous graph: METIS on the type-erased graph, one balance constraint per node type.

Every part gets a fair share of each node type (checked by
`type_balance`). Local order, halo plans and the one all-to-all per layer are
those of the type-erased graph (one buffer carries every type); each local row
knows its node type, each local edge its relation, and each node type's
features are stored at their own width (format version 2).

Relation-aggregation-first plans (Heta): for each pair of parts, the owner of
the source rows could send, instead of the raw rows a peer needs, one partial
aggregate per (remote destination, relation). `relagg_plan` counts both per
(owner, receiver) pair so the runtime can send whichever is fewer rows.
"""
from __future__ import annotations

import numpy as np

from partition.build import build_parts
from partition.hetero import HeteroGraph
from partition.methods import assign_parts
from partition.stats import partition_stats
from partition.store import HETERO_VERSION, write_partition


def type_balance(parts: np.ndarray, node_type: np.ndarray, num_parts: int, num_types: int) -> np.ndarray:
    """[num_parts, num_types] node counts."""
    return np.bincount(parts * num_types + node_type, minlength=num_parts * num_types).reshape(num_parts, num_types)


def write_hetero_partition(out, hg: HeteroGraph, num_parts: int, method: str = "metis", seed: int = 0,
                           objective: str = "cut", force: bool = False, dataset: str | None = None) -> dict:
    g = hg.to_homogeneous()
    num_types = len(hg.node_types)
    kwargs = {"seed": seed}
    if method == "metis":
        onehot = np.zeros((g.num_nodes, num_types), np.int64)
        onehot[np.arange(g.num_nodes), g.node_type] = 1
        kwargs.update(objective=objective, vweights=np.concatenate([np.ones((g.num_nodes, 1), np.int64), onehot], 1))
    parts = assign_parts(g, num_parts, method, **kwargs)
    counts = type_balance(parts, g.node_type, num_parts, num_types)
    off = hg.offsets
    typed = {}

    def plans():
        for plan in build_parts(g, parts, num_parts):
            inner_t = plan.node_type[: plan.num_inner]
            glob = plan.global_ids[: plan.num_inner]
            typed[plan.part] = {f"x_{t}": hg.x[name][glob[inner_t == t] - off[name]]
                                for t, name in enumerate(hg.node_types)}
            yield plan

    meta = {
        "graph": hg.name, "dataset": dataset or hg.name, "num_parts": num_parts, "method": method,
        "objective": objective if method == "metis" else None, "balance": ["node_type"], "seed": seed,
        "num_nodes": g.num_nodes, "num_edges": g.num_edges, "num_features": 0, "num_classes": hg.num_classes,
        "num_train": int(g.train_mask.sum()), "weighted": False, **hg.meta(),
        "type_counts": counts.tolist(),
    }
    return write_partition(out, meta, parts, plans(), force=force, version=HETERO_VERSION,
                           extras=lambda k: typed.pop(k),
                           summarize=lambda rows: {"stats": partition_stats(g, parts, rows)})
