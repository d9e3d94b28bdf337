"""ogb:<name> reads OGB's own folder layout (CSV, or papers100M's binary npz) with OGB's split, no ogb package."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from gnn_dist.train.metrics import roc_auc
from partition.errors import DataError, UsageError

pytestmark = pytest.mark.usefixtures("no_network")


def _csv(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        for r in np.atleast_2d(rows) if np.ndim(rows) > 1 else np.asarray(rows)[:, None]:
            fh.write(",".join(str(v) for v in r) + "\n")


@pytest.fixture
def arxiv(tmp_path, monkeypatch):
    """ogbn-arxiv's layout, shrunk: directed citations, 8 float features, 5 classes, the 'time' split."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    n, e = 60, 200
    raw, split = tmp_path / "ogbn_arxiv" / "raw", tmp_path / "ogbn_arxiv" / "split" / "time"
    edges = rng.integers(0, n, (e, 2))
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = rng.integers(0, 5, n)
    _csv(raw / "edge.csv.gz", edges)
    _csv(raw / "node-feat.csv.gz", x)
    _csv(raw / "node-label.csv.gz", y)
    _csv(raw / "num-node-list.csv.gz", [n])
    _csv(raw / "num-edge-list.csv.gz", [e])
    perm = rng.permutation(n)
    for name, idx in (("train", perm[:30]), ("valid", perm[30:45]), ("test", perm[45:])):
        _csv(split / f"{name}.csv.gz", idx)
    return tmp_path, edges, x, y, perm


def test_arxiv_csv_layout_with_the_official_split(arxiv):
    root, edges, x, y, perm = arxiv
    g = load_dataset("ogb:ogbn-arxiv", data_dir=str(root))
    src, dst = g.edge_index()
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(map(tuple, edges.tolist()))  # directed, as OGB gives
    np.testing.assert_allclose(g.x, x, rtol=1e-6)
    assert isinstance(g.x.base, np.memmap) or isinstance(g.x, np.memmap)  # features live in a memory map
    assert np.array_equal(g.y, y) and np.flatnonzero(g.train_mask).tolist() == sorted(perm[:30].tolist())
    assert not (g.train_mask & g.test_mask).any() and g.val_mask.sum() == 15
    assert load_dataset("ogb:ogbn-arxiv?reverse=true", data_dir=str(root)).num_edges == 2 * len(edges)


def test_papers100m_binary_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rng = np.random.default_rng(1)
    n = 70_000  # more than one block of rows
    raw = tmp_path / "ogbn_papers100M" / "raw"
    raw.mkdir(parents=True)
    x = rng.standard_normal((n, 4)).astype(np.float16)
    edge_index = rng.integers(0, n, (2, 300))
    np.savez_compressed(raw / "data.npz", edge_index=edge_index, node_feat=x, num_nodes_list=np.array([n]),
                        num_edges_list=np.array([300]))
    label = np.full((n, 1), np.nan)
    label[:100, 0] = rng.integers(0, 3, 100)
    np.savez_compressed(raw / "node-label.npz", node_label=label)
    for name, idx in (("train", np.arange(60)), ("valid", np.arange(60, 80)), ("test", np.arange(80, 100))):
        _csv(tmp_path / "ogbn_papers100M" / "split" / "time" / f"{name}.csv.gz", idx)
    g = load_dataset("ogb:ogbn-papers100M", data_dir=str(tmp_path))
    assert g.num_nodes == n and np.array_equal(g.x, x.astype(np.float32))
    assert (g.y[100:] == -1).all() and g.train_mask.sum() == 60 and g.num_edges == 300


def test_missing_files_and_unsupported_sets_are_one_line(arxiv, tmp_path):
    root = arxiv[0]
    (root / "ogbn_arxiv" / "raw" / "node-label.csv.gz").unlink()
    with pytest.raises(DataError, match="ogb:ogbn-arxiv: node-label.csv.gz is missing from .*ogbn_arxiv/raw"):
        load_dataset("ogb:ogbn-arxiv", data_dir=str(root))
    with pytest.raises(DataError, match="OGB's folder ogbn_products/ is not in"):
        load_dataset("ogb:ogbn-products", data_dir=str(root))
    with pytest.raises(UsageError, match="node_features=edge_sum|edge_mean applies to ogbn-proteins"):
        load_dataset("ogb:ogbn-arxiv?node_features=edge_mean", data_dir=str(root))


def test_roc_auc_is_the_pairwise_probability_with_ties_counted_half():
    rng = np.random.default_rng(2)
    truth = (rng.random((300, 5)) < 0.3).astype(float)
    truth[:, 4] = 1  # no negatives: left out, as OGB's evaluator leaves it out
    truth[:7, 2] = np.nan  # unlabelled entries are skipped
    scores = np.round(rng.standard_normal((300, 5)) + truth, 1)  # rounded: many ties
    want = []
    for t in range(4):
        known = ~np.isnan(truth[:, t])
        p, n = scores[known & (truth[:, t] == 1), t], scores[known & (truth[:, t] == 0), t]
        want.append(((p[:, None] > n[None, :]).sum() + 0.5 * (p[:, None] == n[None, :]).sum()) / (len(p) * len(n)))
    assert abs(roc_auc(truth, scores) - np.mean(want)) < 1e-12
    assert np.isnan(roc_auc(np.ones((4, 1)), np.zeros((4, 1))))


def write_proteins(root, tasks: int = 6, n: int = 80, e: int = 300):
    """ogbn-proteins' layout, shrunk: undirected edges stored once with 8 edge features, binary tasks, no node
    features, the 'species' split."""
    rng = np.random.default_rng(4)
    raw, split = root / "ogbn_proteins" / "raw", root / "ogbn_proteins" / "split" / "species"
    edges = rng.integers(0, n, (e, 2))
    feat = rng.random((e, 8)).round(3)
    group = rng.integers(0, 2, n)
    y = ((rng.random((n, tasks)) < 0.3) ^ (group[:, None] == (np.arange(tasks) % 2))).astype(int)
    _csv(raw / "edge.csv.gz", edges)
    _csv(raw / "edge-feat.csv.gz", feat)
    _csv(raw / "node-label.csv.gz", y)
    _csv(raw / "node_species.csv.gz", rng.integers(3702, 3710, n))
    _csv(raw / "num-node-list.csv.gz", [n])
    _csv(raw / "num-edge-list.csv.gz", [e])
    perm = rng.permutation(n)
    for name, idx in (("train", perm[: n // 2]), ("valid", perm[n // 2: 3 * n // 4]), ("test", perm[3 * n // 4:])):
        _csv(split / f"{name}.csv.gz", idx)
    return edges, feat, y


def test_proteins_layout_multilabel_featureless_and_edge_feature_nodes(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    edges, feat, y = write_proteins(tmp_path)
    g = load_dataset("ogb:ogbn-proteins", data_dir=str(tmp_path))
    assert g.multilabel and g.num_classes == 6 and g.num_features == 0 and g.metric == "rocauc"
    assert np.array_equal(g.y, y) and g.num_edges == 2 * len(edges)  # OGB's loader adds every reverse
    g = load_dataset("ogb:ogbn-proteins?node_features=edge_mean", data_dir=str(tmp_path))
    node = int(edges[0, 1])
    into = np.r_[feat[edges[:, 1] == node], feat[edges[:, 0] == node]]  # both directions of its edges
    np.testing.assert_allclose(g.x[node], into.mean(axis=0), rtol=1e-5)


def write_mag(root):
    """ogbn-mag's layout, shrunk: four node types, features for papers only, four relations, labels and the
    'time' split for papers."""
    rng = np.random.default_rng(5)
    raw, split = root / "ogbn_mag" / "raw", root / "ogbn_mag" / "split" / "time"
    counts = {"author": 40, "field_of_study": 12, "institution": 5, "paper": 60}
    raw.mkdir(parents=True)
    with gzip.open(raw / "num-node-dict.csv.gz", "wt") as fh:
        fh.write(",".join(counts) + "\n" + ",".join(map(str, counts.values())) + "\n")
    with gzip.open(raw / "nodetype-has-label.csv.gz", "wt") as fh:
        fh.write(",".join(counts) + "\nFalse,False,False,True\n")
    rels = [("author", "affiliated_with", "institution"), ("author", "writes", "paper"), ("paper", "cites", "paper"),
            ("paper", "has_topic", "field_of_study")]
    _csv(raw / "triplet-type-list.csv.gz", np.array(rels))
    for h, r, t in rels:
        e = np.stack([rng.integers(0, counts[h], 90), rng.integers(0, counts[t], 90)], 1)
        _csv(raw / "relations" / f"{h}___{r}___{t}" / "edge.csv.gz", e)
        _csv(raw / "relations" / f"{h}___{r}___{t}" / "num-edge-list.csv.gz", [90])
    x = rng.standard_normal((60, 6)).astype(np.float32)
    _csv(raw / "node-feat" / "paper" / "node-feat.csv.gz", x)
    _csv(raw / "node-label" / "paper" / "node-label.csv.gz", rng.integers(0, 4, 60))
    split.mkdir(parents=True)
    with gzip.open(split / "nodetype-has-split.csv.gz", "wt") as fh:
        fh.write(",".join(counts) + "\nFalse,False,False,True\n")
    for name, idx in (("train", np.arange(30)), ("valid", np.arange(30, 45)), ("test", np.arange(45, 60))):
        _csv(split / "paper" / f"{name}.csv.gz", idx)
    return x


def test_mag_layout_is_a_typed_graph_with_featureless_types(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    x = write_mag(tmp_path)
    hg = load_dataset("ogb:ogbn-mag", data_dir=str(tmp_path))
    assert hg.node_types == ["author", "field_of_study", "institution", "paper"] and hg.target == "paper"
    np.testing.assert_allclose(hg.x["paper"], x, rtol=1e-6)
    assert hg.x["author"].shape == (40, 0) and len(hg.edge_types) == 4 and hg.num_classes == 4
    assert hg.train_mask.sum() == 30 and not (hg.train_mask & hg.test_mask).any()
    hg = load_dataset("ogb:ogbn-mag?reverse=true", data_dir=str(tmp_path))
    assert ("paper", "rev_writes", "author") in hg.edge_types and len(hg.edge_types) == 8
