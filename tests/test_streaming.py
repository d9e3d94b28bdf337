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


def test_rmat_is_symmetric_with_skewed_degrees():
    g = load_dataset("rmat:scale=12,edges=40000,seed=3")
    assert g.num_nodes == 4096
    src, dst = g.edge_index()
    fwd = set(zip(src.tolist(), dst.tolist()))
    assert all((d, s) in fwd for s, d in list(fwd)[:2000]) and not (src == dst).any()
    deg = g.in_degree()
    assert deg.max() > 20 * max(np.median(deg), 1)  # R-MAT's heavy tail
