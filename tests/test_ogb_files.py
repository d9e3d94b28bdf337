"""ogb:<name> reads OGB's own folder layout (CSV, or papers100M's binary npz) with OGB's split, no ogb package."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition.errors import DataError

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
    with pytest.raises(DataError, match="multi-label targets"):
        load_dataset("ogb:ogbn-proteins", data_dir=str(root))
