"""Hold out edges for link prediction: removed from the graph that is partitioned, kept with negatives.

A pair and its reverse are held out together (a model must not see v -> u
while asked to predict u -> v). Negatives are random pairs that are not
edges, as many as positives. Everything is seeded.
"""
from __future__ import annotations

import numpy as np

from partition.errors import UsageError
from partition.graph import Graph


def split_links(graph: Graph, val: float, test: float, seed: int = 0) -> tuple[Graph, dict]:
    if val < 0 or test < 0 or val + test >= 1:
        raise UsageError(f"--link-split wants VAL,TEST fractions >= 0 with VAL + TEST < 1, got {val},{test}")
    n = graph.num_nodes
    src, dst = graph.edge_index()
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pair = lo * n + hi
    uniq = np.unique(pair[src != dst])
    rng = np.random.default_rng([seed, 0x11C])
    u = rng.random(uniq.shape[0])
    kind = np.where(u < test, 2, np.where(u < test + val, 1, 0))  # 0 train, 1 val, 2 test
    edge_kind = np.zeros(src.shape[0], np.int64)
    loop = src == dst
    edge_kind[~loop] = kind[np.searchsorted(uniq, pair[~loop])]
    keep = edge_kind == 0
    out = {}
    for k, name in ((1, "val"), (2, "test")):
        p = uniq[kind == k]
        out[f"{name}_src"], out[f"{name}_dst"] = p // n, p % n
        neg = rng.integers(0, n, (p.shape[0] * 2 + 16, 2))
        neg = neg[neg[:, 0] != neg[:, 1]]
        key = np.minimum(neg[:, 0], neg[:, 1]) * n + np.maximum(neg[:, 0], neg[:, 1])
        neg = neg[~np.isin(key, pair)][: p.shape[0]]
        out[f"{name}_neg_src"], out[f"{name}_neg_dst"] = neg[:, 0], neg[:, 1]
    train = Graph.from_edges(src[keep], dst[keep], n, graph.x, graph.y, graph.train_mask, graph.val_mask,
                             graph.test_mask, None if graph.edge_weight is None else graph.edge_weight[keep],
                             graph.name, graph.num_classes,
                             edge_attr=None if graph.edge_attr is None else graph.edge_attr[keep],
                             original_ids=graph.original_ids)
    return train, out
