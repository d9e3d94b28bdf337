"""Streaming partitioners cut far fewer edges than random, stay balanced, and repeat under a seed; R-MAT is well formed."""
from __future__ import annotations

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition import assign_parts


def _cut(graph, parts):
    src, dst = graph.edge_index()
    return int((parts[src] != parts[dst]).sum())


@pytest.mark.parametrize("method", ["fennel", "ldg"])
def test_streaming_beats_random_and_stays_balanced(small_sbm, method):
    k = 4
    parts = assign_parts(small_sbm, k, method, seed=1)
    counts = np.bincount(parts, minlength=k)
    assert counts.min() > 0 and counts.max() <= 1.06 * small_sbm.num_nodes / k + 1
    random_cut = _cut(small_sbm, assign_parts(small_sbm, k, "random", seed=1))
    assert _cut(small_sbm, parts) < 0.75 * random_cut  # one pass (METIS: 0.34x here)
    assert np.array_equal(parts, assign_parts(small_sbm, k, method, seed=1))
    restream = assign_parts(small_sbm, k, method, seed=1, passes=4)  # restreaming sees every neighbour
    assert _cut(small_sbm, restream) < 0.55 * random_cut


def shuffled_grid(side: int):
    """A side x side grid whose node ids are a seeded permutation: the id order carries no locality."""
    from partition.graph import Graph

    idx = np.arange(side * side).reshape(side, side)
    src = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    dst = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    perm = np.random.default_rng(11).permutation(side * side)
    src, dst = perm[src], perm[dst]
    n = side * side
    ones = np.ones(n, bool)
    return Graph.from_edges(np.r_[src, dst], np.r_[dst, src], n, np.zeros((n, 1), np.float32), np.zeros(n), ones,
                            ones, ones)


def test_fennel_in_bfs_order_follows_a_mesh():
    """One pass, breadth-first: within 2x METIS's cut on a shuffled grid; random order is no better than random."""
    g = shuffled_grid(400)  # the goal of the partitioning issue: 160,000 nodes, 8 parts
    metis = _cut(g, assign_parts(g, 8, "metis"))
    bfs = assign_parts(g, 8, "fennel")
    assert _cut(g, bfs) < 2 * metis, (_cut(g, bfs), metis)
    assert np.bincount(bfs).max() <= 1.05 * g.num_nodes / 8 + 1
    assert _cut(g, assign_parts(g, 8, "fennel", order="random")) > 10 * metis


def test_rmat_is_symmetric_with_skewed_degrees():
    g = load_dataset("rmat:scale=12,edges=40000,seed=3")
    assert g.num_nodes == 4096
    src, dst = g.edge_index()
    fwd = set(zip(src.tolist(), dst.tolist()))
    assert all((d, s) in fwd for s, d in list(fwd)[:2000]) and not (src == dst).any()
    deg = g.in_degree()
    assert deg.max() > 20 * max(np.median(deg), 1)  # R-MAT's heavy tail
