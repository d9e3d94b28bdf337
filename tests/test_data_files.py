"""Graph files in their real layouts: gnn-benchmark npz, METIS, compressed edge lists, typed npz without masks.

Each silent misread the loaders once made now fails with one line; options ride on the path with one grammar.
"""
from __future__ import annotations

import bz2
import gzip
import shutil

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from gnn_dist.data.options import split_spec
from partition.errors import DataError, UsageError
from tests.conftest import ROOT, run_cli

BENCH = ROOT / "datasets" / "gnn_benchmark" / "cora.npz"


def _edges(g) -> set:
    src, dst = g.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


def test_gnn_benchmark_npz_reads_as_pyg_reads_it():
    from torch_geometric.io import read_npz

    ref = read_npz(str(BENCH))  # PyG's reader for Amazon, Coauthor and CitationFull (no network)
    g = load_dataset(f"file:{BENCH}?split=20")
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert _edges(g) == set(zip(*(t.tolist() for t in ref.edge_index)))
    assert np.array_equal(g.x, ref.x.numpy()) and np.array_equal(g.y, ref.y.numpy())


def test_seeded_splits_are_disjoint_and_follow_the_protocol():
    g = load_dataset(f"file:{BENCH}?split=20&val=30&seed=4")
    tr, va, te = g.train_mask, g.val_mask, g.test_mask
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any() and (tr | va | te).all()
    assert (np.bincount(g.y[tr], minlength=7) == 20).all() and (np.bincount(g.y[va], minlength=7) == 30).all()
    again = load_dataset(f"file:{BENCH}?split=20&val=30&seed=4")
    other = load_dataset(f"file:{BENCH}?split=20&val=30&seed=5")
    assert np.array_equal(again.train_mask, tr) and not np.array_equal(other.train_mask, tr)
    g = load_dataset(f"file:{BENCH}?split=0.6,0.2")  # a value with a comma
    assert (g.train_mask.sum(), g.val_mask.sum(), g.test_mask.sum()) == (1625, 542, 541)


def test_largest_connected_component():
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    g = load_dataset(f"file:{BENCH}?lcc=true&split=20")
    src, dst = g.edge_index()
    adj = sp.coo_matrix((np.ones(src.shape[0]), (src, dst)), shape=(g.num_nodes, g.num_nodes))
    assert g.num_nodes == 2485 and connected_components(adj, directed=False)[0] == 1


def test_a_file_without_masks_gets_a_seeded_split_and_a_note(tmp_path):
    f = tmp_path / "g.npz"
    np.savez(f, src=[0, 1, 2, 3], dst=[1, 2, 3, 0], x=np.eye(4, dtype=np.float32), y=[0, 1, 0, 1])
    r = run_cli("partition", "--dataset", f"file:{f}", "--parts", "1", "--out", str(tmp_path / "p"))
    assert r.returncode == 0 and "stores no train/val/test masks: drew a seeded 60/20/20 split" in r.stderr


def test_the_option_grammar(tmp_path):
    assert split_spec("a:b/c.npz?split=0.6,0.2&seed=3", "s", ("split", "seed")) == \
        ("a:b/c.npz", {"split": "0.6,0.2", "seed": "3"})  # colons in the path, commas in a value
    assert split_spec("x%3Fy.npz?split=a%26b", "s", ("split",)) == ("x?y.npz", {"split": "a&b"})
    folder = tmp_path / "a:b"
    folder.mkdir()
    shutil.copy(BENCH, folder / "c.npz")
    assert load_dataset(f"file:{folder / 'c.npz'}?split=20").num_nodes == 2708
    with pytest.raises(UsageError, match="unknown option 'bogus' .*takes lcc, split"):
        load_dataset(f"file:{BENCH}?bogus=1")
    with pytest.raises(UsageError, match="split must be a count per class"):
        load_dataset(f"file:{BENCH}?split=lots")


METIS = "% a 4-cycle with a chord, weighted\n4 5 001\n2 1 3 2 4 7\n1 1 3 1\n1 2 2 1 4 5\n3 5 1 7\n"


@pytest.mark.parametrize("opener,suffix", [(open, ""), (gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_metis_files_plain_and_compressed(tmp_path, opener, suffix):
    f = tmp_path / f"g.graph{suffix}"
    with opener(f, "wt") as fh:
        fh.write(METIS)
    g = load_dataset(f"metis:{f}")
    assert g.num_nodes == 4 and g.num_edges == 10 and _edges(g) == {
        (1, 0), (2, 0), (3, 0), (0, 1), (2, 1), (1, 2), (0, 2), (3, 2), (2, 3), (0, 3)}
    src, dst = g.edge_index()
    w = dict(zip(zip(src.tolist(), dst.tolist()), g.edge_weight.tolist()))
    assert w[(3, 0)] == w[(0, 3)] == 7 and w[(2, 1)] == 1


@pytest.mark.parametrize("text,needle", [
    ("4 5\n2 3\n", "the header says 4 vertices but 1 vertex lines follow"),
    ("2 5\n2\n1\n", "the header says 5 edges (10 adjacency entries) but the lines list 2"),
    ("2 1\n3\n1\n", "line 2: neighbour ids must be integers in 1..2"),
    ("2 1 001\n2\n1 1\n", "line 2: neighbour and weight pairs expected"),
    ("src,dst\n0,1\n", "line 1: expected the header 'n m [fmt [ncon]]'"),
])
def test_metis_files_that_do_not_fit_get_one_line(tmp_path, text, needle):
    f = tmp_path / "bad.graph"
    f.write_text(text)
    with pytest.raises(DataError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_dataset(f"metis:{f}")


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_compressed_edge_lists_and_reverse_edges(tmp_path, opener, suffix):
    f = tmp_path / f"e.csv{suffix}"
    with opener(f, "wt") as fh:
        fh.write("src,dst\n0,1\n1,2\n2,0\n1,0\n")  # 1 -> 0 is stored both ways already
    g = load_dataset(f"edges:{f}")
    assert _edges(g) == {(0, 1), (1, 2), (2, 0), (1, 0)}
    g = load_dataset(f"edges:{f}?reverse=true")  # OGB stores one direction: add the other, merge duplicates
    assert g.num_edges == 6 and _edges(g) == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 0), (0, 2)}


def test_a_metis_file_is_never_read_as_an_edge_list(tmp_path):
    (tmp_path / "g.graph").write_text(METIS)
    with pytest.raises(DataError, match="looks like a METIS graph file: read it with metis:"):
        load_dataset(f"edges:{tmp_path / 'g.graph'}")
    (tmp_path / "g.txt").write_text(METIS)  # the same lines under an edge-list name
    with pytest.raises(DataError, match="data lines have 3 and 6 columns; edges: reads one 'src dst' pair"):
        load_dataset(f"edges:{tmp_path / 'g.txt'}")


def test_typed_npz_without_masks_never_leaks_the_test_set(tmp_path):
    rng = np.random.default_rng(0)
    f = tmp_path / "h.npz"
    np.savez(f, node_types=np.array(["paper", "author"]), edge_types=np.array(["author:writes:paper"]),
             **{"x:paper": rng.standard_normal((50, 3)).astype(np.float32),
                "x:author": rng.standard_normal((20, 2)).astype(np.float32),
                "edge_index:author:writes:paper": np.stack([rng.integers(0, 20, 80), rng.integers(0, 50, 80)])},
             target=np.array("paper"), y=rng.integers(0, 3, 50))
    hg = load_dataset(f"hfile:{f}")
    tr, va, te = hg.train_mask, hg.val_mask, hg.test_mask
    assert not (tr & te).any() and not (tr & va).any() and not (va & te).any() and (tr | va | te).all()
    assert (tr.sum(), va.sum(), te.sum()) == (30, 10, 10)
    hg = load_dataset(f"hfile:{f}?split=5&val=5")
    assert (np.bincount(hg.y[hg.train_mask], minlength=3) == 5).all()
    r = run_cli("partition", "--dataset", f"hfile:{f}", "--parts", "1", "--out", str(tmp_path / "p"))
    assert r.returncode == 0 and "stores no train/val/test masks for its target type" in r.stderr, r.stderr


def test_loaders_never_touch_the_network(tmp_path, no_network):
    (tmp_path / "g.graph").write_text(METIS)
    for spec in ("cora", "karate", f"file:{BENCH}?split=20", f"metis:{tmp_path / 'g.graph'}", "chickenpox",
                 "england_covid", "hsbm:papers=200,authors=100,venues=4", "sbm:nodes=100,classes=2"):
        assert load_dataset(spec) is not None


def test_every_form_is_listed_and_documented():
    from gnn_dist.data.registry import CATALOGUE

    r = run_cli("datasets")
    assert r.returncode == 0, r.stderr
    docs = (ROOT / "docs" / "datasets.md").read_text().replace("\\|", "|")  # table cells escape their |
    for form, kind, _needs, _what in CATALOGUE:
        assert form in r.stdout
        prefix = form.split("<")[0].split("[")[0].split("key=")[0]
        assert f"`{prefix}" in docs, f"docs/datasets.md does not describe {form}"


def test_an_unknown_networkx_generator_lists_the_ones_it_loads():
    with pytest.raises(DataError, match="no graph generator 'nonexistent'; ones that take no arguments: "
                                        "karate_club_graph, .*les_miserables_graph, .*petersen_graph"):
        load_dataset("nx:nonexistent")
    assert load_dataset("nx:petersen_graph").num_nodes == 10
