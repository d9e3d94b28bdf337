"""Per-part snapshot plans stored as differences from the previous snapshot (docs/design.md §8).

Everything is expressed in the *union* local ids of each part (the order
`build_parts` gives the union graph), which never change over time: inner
rows keep their place, so node state never moves, and a snapshot's halo is a
subset of the union halo. Snapshot t then differs from t-1 by:

- edges added, removed, or kept with a new weight (keys row * n_local + col);
- halo rows that start or stop being received (flips of a bit per union halo row);
- rows peers start or stop needing from us (flips per entry of the union send list);
- inner rows that become or stop being marginal (flips per inner row).

Global degrees and self-loop flags of every local row are stored dense per
snapshot: they change wherever any edge into the node changes.
"""
from __future__ import annotations

import numpy as np

from partition.build import PartPlan, build_parts
from partition.dynamic import Snapshots
from partition.methods import WEIGHTED, assign_parts
from partition.store import SNAPSHOT_FILE, SNAPSHOT_VERSION, pack_ragged, write_partition


def edge_diff(prev_key: np.ndarray, prev_w: np.ndarray, key: np.ndarray, w: np.ndarray):
    """(added keys, added weights, removed keys, reweighted keys, new weights); keys sorted and unique."""
    added = ~np.isin(key, prev_key, assume_unique=True)
    removed = ~np.isin(prev_key, key, assume_unique=True)
    kept_new = np.flatnonzero(~added)
    kept_old = np.searchsorted(prev_key, key[kept_new])
    changed = prev_w[kept_old] != w[kept_new]
    return key[added], w[added], prev_key[removed], key[kept_new[changed]], w[kept_new[changed]]


def build_snapshot_diffs(seq: Snapshots, parts: np.ndarray, plans: list[PartPlan]) -> tuple[list[dict], list[dict]]:
    """One dict of arrays per part (written to part-K/snapshots.npz) and the churn of every step."""
    n, num_parts, T = seq.num_nodes, len(plans), seq.num_snapshots
    local_of = np.empty(n, dtype=np.int64)
    for p in plans:
        local_of[p.global_ids[: p.num_inner]] = np.arange(p.num_inner)
    halo_sorted = [np.sort(p.global_ids[p.num_inner:]) for p in plans]
    halo_pos = [np.argsort(p.global_ids[p.num_inner:], kind="stable") for p in plans]
    recv_bounds = [np.concatenate(([0], np.cumsum(p.recv_counts))) for p in plans]

    state = [{"key": np.zeros(0, np.int64), "w": np.zeros(0, np.float32),
              "recv": np.zeros(p.num_halo, bool), "send": np.zeros(p.send_idx.shape[0], bool),
              "marg": np.zeros(p.num_inner, bool)} for p in plans]
    out = [{k: [] for k in ("add_key", "add_w", "del_key", "rew_key", "rew_w", "recv_flip", "send_flip",
                            "marg_flip", "in_weight", "in_degree", "self_loop")} for _ in plans]
    churn = []
    for t in range(T):
        src, dst, w = seq.coalesced(t)
        in_w = np.bincount(dst, weights=w, minlength=n)
        in_d = np.bincount(dst, minlength=n)
        loops = np.zeros(n, bool)
        loops[dst[src == dst]] = True
        owner = parts[dst]
        recv_now = []
        step = {"halo_added": 0, "halo_removed": 0, "edges_added": 0, "edges_removed": 0, "edges": int(src.shape[0]),
                "halo": 0}
        for p, plan in enumerate(plans):
            sel = owner == p
            key, ww, recv, marg = _local_snapshot(plan, parts, local_of, halo_sorted[p], halo_pos[p],
                                                  src[sel], dst[sel], w[sel])
            st, o = state[p], out[p]
            a_k, a_w, d_k, r_k, r_w = edge_diff(st["key"], st["w"], key, ww)
            for name, arr in (("add_key", a_k), ("add_w", a_w), ("del_key", d_k), ("rew_key", r_k), ("rew_w", r_w)):
                o[name].append(arr)
            o["recv_flip"].append(np.flatnonzero(recv != st["recv"]))
            o["marg_flip"].append(np.flatnonzero(marg != st["marg"]))
            step["halo"] += int(recv.sum())
            step["halo_added"] += int((recv & ~st["recv"]).sum())
            step["halo_removed"] += int((~recv & st["recv"]).sum())
            step["edges_added"] += int(a_k.shape[0])
            step["edges_removed"] += int(d_k.shape[0])
            glob = plan.global_ids
            o["in_weight"].append(in_w[glob])
            o["in_degree"].append(in_d[glob].astype(np.int32))
            o["self_loop"].append(loops[glob])
            st.update(key=key, w=ww, recv=recv, marg=marg)
            recv_now.append(recv)
        for q, plan in enumerate(plans):  # q sends to p exactly the rows p receives from q, in the same order
            send = np.concatenate([recv_now[p][recv_bounds[p][q]:recv_bounds[p][q + 1]] for p in range(num_parts)])
            out[q]["send_flip"].append(np.flatnonzero(send != state[q]["send"]))
            state[q]["send"] = send
        churn.append(step)

    return [_stored_arrays(o) for o in out], churn


def _local_snapshot(plan: PartPlan, parts: np.ndarray, local_of: np.ndarray, halo_sorted: np.ndarray,
                    halo_pos: np.ndarray, s: np.ndarray, d: np.ndarray, w: np.ndarray):
    """One snapshot's in-edges s -> d of a part in its union local ids: (sorted edge keys row * n_local + col,
    their weights, which halo rows it receives, which inner rows are marginal)."""
    p = plan.part
    own = parts[s] == p
    cols = np.empty_like(s)
    cols[own] = local_of[s[own]]
    cols[~own] = plan.num_inner + halo_pos[np.searchsorted(halo_sorted, s[~own])]
    rows = local_of[d]
    key = rows * plan.global_ids.shape[0] + cols
    order = np.argsort(key)
    recv = np.zeros(plan.num_halo, bool)
    recv[cols[~own] - plan.num_inner] = True
    marg = np.zeros(plan.num_inner, bool)
    marg[rows[~own]] = True
    return key[order], w[order], recv, marg


def _stored_arrays(o: dict) -> dict:
    """A part's per-snapshot lists packed into the arrays of part-K/snapshots.npz."""
    arrays = {}
    for name, dtype in (("add_key", np.int64), ("add_w", np.float32), ("del_key", np.int64),
                        ("rew_key", np.int64), ("rew_w", np.float32), ("recv_flip", np.int64),
                        ("send_flip", np.int64), ("marg_flip", np.int64)):
        arrays[name], arrays[name + "_off"] = pack_ragged(o[name], dtype)
    for name in ("in_weight", "in_degree", "self_loop"):
        arrays[name] = np.stack(o[name])
    return arrays


def write_snapshot_partition(out, seq: Snapshots, num_parts: int, method: str = "metis", seed: int = 0,
                             force: bool = False, dataset: str | None = None, **options) -> dict:
    """Partition the union graph once (edges weighted by how many snapshots hold them), write format 3.

    `options`: what the method takes besides the seed (objective, mode).
    """
    union = seq.union_graph()
    kwargs = dict(options, seed=seed)
    if method in WEIGHTED:  # an edge present all the time costs more to cut than one seen once
        kwargs.update(edge_weight=union.edge_weight)
    parts = assign_parts(union, num_parts, method, **kwargs)
    plans = list(build_parts(union, parts, num_parts))
    diffs, churn = build_snapshot_diffs(seq, parts, plans)
    for plan in plans:  # inner rows x time: each node's series lives with its owner
        inner = plan.global_ids[: plan.num_inner]
        plan.x = np.ascontiguousarray(seq.x[:, inner].transpose(1, 0, 2))
        plan.y = np.ascontiguousarray(seq.y[:, inner].T)
    steps = churn[1:]
    mean = lambda key: float(np.mean([c[key] for c in steps])) if steps else 0.0
    summary = {
        "halo_rows_union": int(sum(p.num_halo for p in plans)),
        "halo_rows_mean": float(np.mean([c["halo"] for c in churn])),
        "halo_added_per_step": mean("halo_added"), "halo_removed_per_step": mean("halo_removed"),
        "edges_added_per_step": mean("edges_added"), "edges_removed_per_step": mean("edges_removed"),
    }
    meta = {
        "graph": seq.name, "dataset": dataset or seq.name, "num_parts": num_parts, "method": method,
        "objective": options.get("objective"), "deterministic": options.get("deterministic", True), "balance": [], "seed": seed,
        "num_nodes": seq.num_nodes, "num_edges": union.num_edges, "num_features": seq.num_features,
        "num_classes": seq.num_classes, "task": seq.task, "num_snapshots": seq.num_snapshots,
        "num_train_snapshots": seq.num_train, "weighted": True, "node_types": None, "edge_types": None,
        "churn": churn, "churn_summary": summary,
    }
    return write_partition(out, meta, parts, plans, force=force, version=SNAPSHOT_VERSION,
                           extras=lambda k: {SNAPSHOT_FILE: diffs[k]})
