"""Partition quality figures: what the exchange will cost and how even the work is."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from partition.graph import Graph


def partition_stats(graph: Graph, parts: np.ndarray, part_rows: Sequence[dict]) -> dict:
    """Whole-partition figures from the assignment and the per-part counts.

    `part_rows` holds per part: inner, central, halo, edges (as stored in partition.json).
    """
    src, dst = graph.edge_index()
    cut = int((parts[src] != parts[dst]).sum())
    inner = np.array([r["inner"] for r in part_rows], dtype=np.float64)
    halo = np.array([r["halo"] for r in part_rows], dtype=np.float64)
    central = np.array([r["central"] for r in part_rows], dtype=np.float64)
    n = max(graph.num_nodes, 1)
    return {
        "num_parts": len(part_rows),
        "edge_cut": cut,
        "edge_cut_fraction": cut / max(graph.num_edges, 1),
        "halo_total": int(halo.sum()),
        "replication_factor": float((inner.sum() + halo.sum()) / n),
        "balance": float(inner.max() / inner.mean()) if inner.size else 1.0,
        "central_fraction": float(central.sum() / n),
    }


def format_stats(summary: dict, part_rows: Sequence[dict]) -> str:
    """The table `gnn-dist partition` ends with and `gnn-dist info` prints from disk."""
    lines = [f"{'part':>4} {'inner':>10} {'central':>10} {'marginal':>10} {'halo':>10} {'edges':>12}"]
    for k, r in enumerate(part_rows):
        lines.append(
            f"{k:>4} {r['inner']:>10} {r['central']:>10} {r['inner'] - r['central']:>10} {r['halo']:>10} {r['edges']:>12}"
        )
    s = summary
    lines.append(
        f"edge cut {s['edge_cut']} ({100 * s['edge_cut_fraction']:.2f}% of edges) | halo total {s['halo_total']} | "
        f"replication {s['replication_factor']:.3f} | balance {s['balance']:.3f} | central {100 * s['central_fraction']:.1f}%"
    )
    return "\n".join(lines)
