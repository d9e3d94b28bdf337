"""Partition quality figures: what the exchange will cost and how even the work is."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from partition.graph import Graph


def send_volume(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> np.ndarray:
    """Rows each part sends per layer: one per (node, other part holding one of its out-neighbours)."""
    cross = parts[src] != parts[dst]
    pairs = np.unique(src[cross].astype(np.int64) * num_parts + parts[dst][cross])
    return np.bincount(parts[pairs // num_parts], minlength=num_parts)


def _max_over_mean(load: np.ndarray) -> float:
    return float(load.max() / load.mean()) if load.size and load.mean() > 0 else 1.0


def is_symmetric(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> bool:
    """Every edge u -> v has its reverse v -> u (the graph is undirected, stored both ways)."""
    n = np.int64(max(num_nodes, 1))
    forward = np.sort(src.astype(np.int64) * n + dst)
    return bool(np.array_equal(forward, np.sort(dst.astype(np.int64) * n + src)))


def partition_stats(graph: Graph, parts: np.ndarray, part_rows: Sequence[dict]) -> dict:
    """Whole-partition figures from the assignment and the per-part counts.

    `part_rows` holds per part: inner, central, halo, edges (as stored in partition.json). An epoch
    waits for its busiest rank, so beside totals this gives each load's balance, max over mean:
    nodes (`balance`), edges, rows sent and rows received (= halo) per layer.
    """
    src, dst = graph.edge_index()
    cut = int((parts[src] != parts[dst]).sum())
    undirected = is_symmetric(src, dst, graph.num_nodes)
    inner = np.array([r["inner"] for r in part_rows], dtype=np.float64)
    halo = np.array([r["halo"] for r in part_rows], dtype=np.float64)
    central = np.array([r["central"] for r in part_rows], dtype=np.float64)
    edges = np.array([r["edges"] for r in part_rows], dtype=np.float64)
    send = send_volume(src, dst, parts, len(part_rows))
    n = max(graph.num_nodes, 1)
    return {
        "num_parts": len(part_rows),
        "edge_cut": cut,
        "edge_cut_fraction": cut / max(graph.num_edges, 1),
        "undirected": undirected,  # every edge stored both ways: the cut counts each undirected edge twice
        "halo_total": int(halo.sum()),
        "replication_factor": float((inner.sum() + halo.sum()) / n),
        "balance": _max_over_mean(inner),
        "central_fraction": float(central.sum() / n),
        "balance_edges": _max_over_mean(edges),
        "send_per_part": send.tolist(),
        "send_max": int(send.max()) if send.size else 0,
        "recv_max": int(halo.max()) if halo.size else 0,
        "balance_send": _max_over_mean(send.astype(np.float64)),
        "balance_recv": _max_over_mean(halo),
    }


def format_stats(summary: dict, part_rows: Sequence[dict]) -> str:
    """The table `gnn-dist partition` ends with and `gnn-dist info` prints from disk."""
    s = summary
    send = s.get("send_per_part")  # absent from partitions written before it was recorded
    lines = [f"{'part':>4} {'inner':>10} {'central':>10} {'marginal':>10} {'halo':>10} {'edges':>12}"
             + (f" {'sent':>10}" if send else "")]
    for k, r in enumerate(part_rows):
        lines.append(
            f"{k:>4} {r['inner']:>10} {r['central']:>10} {r['inner'] - r['central']:>10} {r['halo']:>10} {r['edges']:>12}"
            + (f" {send[k]:>10}" if send else ""))
    cut = (f"edge cut {s['edge_cut'] // 2} undirected edges" if s.get("undirected")
           else f"edge cut {s['edge_cut']} directed edges")
    lines.append(
        f"{cut} ({100 * s['edge_cut_fraction']:.2f}% of all) | halo total "
        f"{s['halo_total']} | replication {s['replication_factor']:.3f} | central {100 * s['central_fraction']:.1f}%")
    if send:
        lines.append(f"balance (max / mean): nodes {s['balance']:.3f} | edges {s['balance_edges']:.3f} | rows sent "
                     f"{s['balance_send']:.3f} (max {s['send_max']}) | rows received (halo) {s['balance_recv']:.3f} "
                     f"(max {s['recv_max']})")
    else:
        lines.append(f"balance (max / mean): nodes {s['balance']:.3f}")
    return "\n".join(lines)
