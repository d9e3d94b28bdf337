"""Partition a typed graph: METIS on the type-erased graph, one balance constraint per node type.

Every part gets a fair share of each node type (checked by
`type_balance`). Local order, halo plans and the one all-to-all per layer are
those of the type-erased graph (one buffer carries every type); each local row
knows its node type, each local edge its relation, and each node type's
features are stored at their own width (format version 2).

Relation-aggregation-first plans (Heta): for each pair of parts, the owner of
the source rows could send, instead of the raw rows a peer needs, one partial
aggregate per (remote destination, relation). `relagg_plans` counts both per
(owner, receiver) pair and plans partial aggregates where they are fewer rows.
"""
from __future__ import annotations

import numpy as np

from partition.build import build_parts, local_order
from partition.graph import Graph
from partition.methods import WEIGHTED, assign_parts, constraint_balance
from partition.stats import partition_stats
from partition.store import RELAGG_FILE, TYPED_FEATURES_FILE, TYPED_VERSION, write_partition
from partition.typed import TypedGraph


def type_balance(parts: np.ndarray, node_type: np.ndarray, num_parts: int, num_types: int) -> np.ndarray:
    """[num_parts, num_types] node counts."""
    return np.bincount(parts * num_types + node_type, minlength=num_parts * num_types).reshape(num_parts, num_types)


def _choose_relations(s: np.ndarray, d: np.ndarray, r: np.ndarray, num_relations: int) -> np.ndarray:
    """Greedy: aggregate relation after relation while it lowers rows sent (raw sources left + aggregates)."""
    agg = np.zeros(num_relations, bool)
    per_rel_dst = np.array([np.unique(d[r == k]).shape[0] for k in range(num_relations)])

    def rows(mask: np.ndarray) -> int:
        raw = np.unique(s[~mask[r]]).shape[0]
        return raw + int(per_rel_dst[mask].sum())

    best = rows(agg)
    while True:
        trials = [(rows(np.where(np.arange(num_relations) == k, True, agg)), k)
                  for k in range(num_relations) if not agg[k] and per_rel_dst[k]]
        if not trials or min(trials)[0] >= best:
            return agg
        best, k = min(trials)
        agg[k] = True


def relagg_plans(g: Graph, parts: np.ndarray, num_parts: int, num_relations: int) -> tuple[list[dict], dict]:
    """Relation-aggregation-first plans per part, keyed by destination, beside the row plans.

    For owner q, receiver p and relation r, q may send one partial aggregate
    per distinct destination d of p, sum_j x_j / deg_r(d) over q's sources j
    (exact for R-GCN's per-relation mean), instead of the raw rows. Per pair
    the relations to aggregate are chosen greedily to minimise rows sent;
    raw rows still needed by other relations keep travelling raw.

    Owner arrays: `b_row, b_col, b_val` (sparse sums, grouped by receiver, `b_off`), `b_rows` (rows per
    receiver), `send_keep` (which rows of the row plan still go raw). Receiver arrays: `pos` (where each
    received aggregate lands in the [R, n_inner] relation aggregate, grouped by owner), `pos_counts`,
    `halo_keep`. `agg_rel[q, p, r]` says which (owner, receiver, relation) are aggregated.
    """
    src, dst = g.edge_index()
    et = g.edge_type
    local_id, _, cross = local_order(g, parts, num_parts)
    n_inner = np.bincount(parts, minlength=num_parts)
    deg = np.bincount(dst * num_relations + et, minlength=g.num_nodes * num_relations)
    s, d, r = src[cross], dst[cross], et[cross]
    q, p = parts[s], parts[d]
    agg_rel = np.zeros((num_parts, num_parts, num_relations), bool)
    keep, blocks = {}, {}
    raw_total = relagg_total = 0
    for qq in range(num_parts):
        for pp in range(num_parts):
            e = np.flatnonzero((q == qq) & (p == pp))
            if e.size == 0:
                continue
            agg_rel[qq, pp] = _choose_relations(s[e], d[e], r[e], num_relations)
            on = agg_rel[qq, pp][r[e]]
            needed = np.unique(s[e])
            needed = needed[np.argsort(local_id[needed], kind="stable")]  # the row plan's order
            keep[qq, pp] = np.isin(needed, s[e][~on])
            ea = e[on]
            key = d[ea] * num_relations + r[ea]
            uniq, row = np.unique(key, return_inverse=True)
            blocks[qq, pp] = (row, local_id[s[ea]], (1.0 / deg[key]).astype(np.float32),
                              (uniq % num_relations) * n_inner[pp] + local_id[uniq // num_relations], uniq.shape[0])
            raw_total += needed.shape[0]
            relagg_total += int(keep[qq, pp].sum()) + uniq.shape[0]
    out = [_part_arrays(k, num_parts, agg_rel, blocks, keep) for k in range(num_parts)]
    summary = {"raw_rows": int(raw_total), "relagg_rows": int(relagg_total),
               "relations_aggregated": int(agg_rel.sum()), "pair_relations": int(num_parts * (num_parts - 1) * num_relations)}
    return out, summary


def _part_arrays(k: int, num_parts: int, agg_rel: np.ndarray, blocks: dict, keep: dict) -> dict:
    """Part k's relagg.npz: what it sends as owner (b_*, send_keep) and what it receives (pos*, halo_keep)."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64), 0)
    mine = [blocks.get((k, pp), empty) for pp in range(num_parts)]
    theirs = [blocks.get((qq, k), empty) for qq in range(num_parts)]
    return {
        "agg_rel": agg_rel,
        "b_row": np.concatenate([b[0] for b in mine]).astype(np.int64),
        "b_col": np.concatenate([b[1] for b in mine]).astype(np.int64),
        "b_val": np.concatenate([b[2] for b in mine]).astype(np.float32),
        "b_off": np.concatenate(([0], np.cumsum([b[0].shape[0] for b in mine]))).astype(np.int64),
        "b_rows": np.array([b[4] for b in mine], np.int64),
        "send_keep": np.concatenate([keep.get((k, pp), np.zeros(0, bool)) for pp in range(num_parts)]),
        "pos": np.concatenate([b[3] for b in theirs]).astype(np.int64),
        "pos_counts": np.array([b[4] for b in theirs], np.int64),
        "halo_keep": np.concatenate([keep.get((qq, k), np.zeros(0, bool)) for qq in range(num_parts)]),
    }


def write_typed_partition(out, hg: TypedGraph, num_parts: int, method: str = "metis", seed: int = 0,
                           force: bool = False, dataset: str | None = None, balance: tuple = (), **options) -> dict:
    """`options`: what the method takes besides the seed (objective, mode); node types are always
    balanced, and `balance` may add "train" (target nodes in training) or "degree"."""
    g = hg.to_homogeneous()
    num_types = len(hg.node_types)
    kwargs = dict(options, seed=seed)
    balance = ("types",) + tuple(b for b in balance if b != "types")
    if method in WEIGHTED:
        kwargs.update(balance=balance)
    parts = assign_parts(g, num_parts, method, **kwargs)
    counts = type_balance(parts, g.node_type, num_parts, num_types)
    relagg, relagg_summary = relagg_plans(g, parts, num_parts, len(hg.edge_types))
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
        "objective": options.get("objective"), "deterministic": options.get("deterministic", True),
        "balance": ["node_type"] + list(balance[1:]), "seed": seed,
        "constraints": constraint_balance(g, parts, num_parts, balance, hg.node_types),
        "num_nodes": g.num_nodes, "num_edges": g.num_edges, "num_features": 0, "num_classes": hg.num_classes,
        "num_train": int(g.train_mask.sum()), "weighted": False, **hg.meta(),
        "type_counts": counts.tolist(), "relagg": relagg_summary,
    }
    return write_partition(out, meta, parts, plans(), force=force, version=TYPED_VERSION,
                           extras=lambda k: {TYPED_FEATURES_FILE: typed.pop(k), RELAGG_FILE: relagg[k]},
                           summarize=lambda rows: {"stats": partition_stats(g, parts, rows)})
