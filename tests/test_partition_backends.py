"""Mt-KaHyPar and KaHIP as partitioner backends, and stats that report the balance of every load."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from partition import assign_parts, build_parts, partition_stats
from partition.backends import out_neighbour_nets
from partition.errors import MissingExtraError


@pytest.fixture(scope="module")
def sbm():
    from gnn_dist.data import load_dataset

    return load_dataset("sbm:nodes=2000,classes=4,avg_degree=8,homophily=0.85,features=4,seed=2")


def stats(graph, parts, k):
    plans = list(build_parts(graph, parts, k))
    rows = [{"inner": p.num_inner, "central": p.num_central, "halo": int(p.recv_counts.sum()),
             "edges": int(p.indices.shape[0])} for p in plans]
    return partition_stats(graph, parts, rows), plans


def test_the_volume_nets_count_exactly_the_halo_rows(sbm):
    """Mt-KaHyPar's vol objective is the connectivity of nets {v} + out-neighbours(v): the halo, exactly."""
    parts = assign_parts(sbm, 4, "random")
    km1 = sum(len(set(parts[net].tolist())) - 1 for net in out_neighbour_nets(sbm))
    s, plans = stats(sbm, parts, 4)
    assert km1 == s["halo_total"] == sum(int(p.recv_counts.sum()) for p in plans)
    assert s["send_per_part"] == [int(p.send_counts.sum()) for p in plans]  # rows sent per layer, per part
    assert s["recv_max"] == max(int(p.recv_counts.sum()) for p in plans)


@pytest.mark.parametrize("method,kw", [("mtkahypar", {"objective": "cut"}), ("mtkahypar", {"objective": "vol"}),
                                       ("kahip", {"mode": "fast"}), ("kahip", {"mode": "eco"})])
def test_backends_give_balanced_partitions_far_better_than_random(sbm, method, kw):
    pytest.importorskip(method)
    parts = assign_parts(sbm, 4, method, seed=1, **kw)
    s, _ = stats(sbm, parts, 4)
    rand, _ = stats(sbm, assign_parts(sbm, 4, "random"), 4)
    assert s["balance"] <= 1.05 and set(np.unique(parts)) == {0, 1, 2, 3}
    assert s["halo_total"] < 0.6 * rand["halo_total"], (s["halo_total"], rand["halo_total"])


def test_backends_keep_extra_balance_constraints(sbm):
    pytest.importorskip("mtkahypar")
    parts = assign_parts(sbm, 4, "mtkahypar", balance=("degree",))
    deg = sbm.in_degree() + sbm.out_degree() + 1
    load = np.bincount(parts, weights=deg, minlength=4)
    assert load.max() <= 1.05 * load.mean() + 1


@pytest.mark.parametrize("method", ["mtkahypar", "kahip"])
def test_a_missing_backend_names_its_extra(sbm, method, monkeypatch):
    monkeypatch.setitem(sys.modules, method, None)  # import now fails, as without the package
    with pytest.raises(MissingExtraError, match=rf"--method {method} needs the {method} package: "
                                             rf"pip install 'gnn-dist\[{method}\]'"):
        assign_parts(sbm, 4, method)


def test_the_stats_table_prints_every_balance():
    from partition import format_stats

    rows = [{"inner": 10, "central": 8, "halo": 3, "edges": 40}, {"inner": 12, "central": 9, "halo": 5, "edges": 20}]
    summary = {"edge_cut": 8, "edge_cut_fraction": 0.1, "halo_total": 8, "replication_factor": 1.36, "balance": 1.09,
               "central_fraction": 0.77, "balance_edges": 1.33, "send_per_part": [5, 3], "send_max": 5,
               "recv_max": 5, "balance_send": 1.25, "balance_recv": 1.25}
    text = format_stats(summary, rows)
    assert "balance (max / mean): nodes 1.090 | edges 1.330 | rows sent 1.250 (max 5) | rows received (halo) " \
           "1.250 (max 5)" in text
    assert "edge cut 8 directed edges (10.00% of all)" in text
    assert "edge cut 4 undirected edges (10.00% of all)" in format_stats(dict(summary, undirected=True), rows)
