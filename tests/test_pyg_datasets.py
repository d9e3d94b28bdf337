"""pyg:<Class>[:<name>] reads a torch_geometric data set from raw files on disk, never downloading."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from gnn_dist.data import load_dataset
from partition.errors import DataError
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.usefixtures("no_network")  # loading never touches the network


def test_planetoid_from_its_raw_files_equals_the_shipped_cora(tmp_path):
    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for f in (ROOT / "datasets" / "cora").glob("ind.cora.*"):
        shutil.copy(f, raw)
    g, ref = load_dataset("pyg:Planetoid:Cora", data_dir=str(tmp_path)), load_dataset("cora")
    assert (g.num_nodes, g.num_edges, g.num_classes) == (2708, 10556, 7)
    for a in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(g, a), getattr(ref, a)), a


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_a_missing_raw_file_is_one_line_naming_file_and_folder(tmp_path):
    with pytest.raises(DataError, match=r"pyg:Planetoid: raw file ind\.citeseer\.x is missing from .*CiteSeer/raw"):
        load_dataset("pyg:Planetoid:CiteSeer", data_dir=str(tmp_path))
    r = run_cli("partition", "--dataset", "pyg:Amazon:Computers", "--data-dir", str(tmp_path), "--parts", "2",
                "--out", str(tmp_path / "o"))
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert r.returncode == 2 and len(lines) == 1 and "amazon_electronics_computers.npz is missing" in lines[0], r.stderr
    with pytest.raises(Exception, match="has no data set class 'Nope'"):
        load_dataset("pyg:Nope", data_dir=str(tmp_path))


def _imdb_raw(raw, rng) -> None:
    """PyG's IMDB raw layout (MAGNN's preprocessing), shrunk: movies, directors, actors."""
    counts = (30, 8, 12)
    for i, n in enumerate(counts):
        sp.save_npz(raw / f"features_{i}.npz", sp.csr_matrix((rng.random((n, 5 + i)) < 0.3).astype(np.float32)))
    np.save(raw / "labels.npy", rng.integers(0, 3, counts[0]))
    perm = rng.permutation(counts[0])
    np.savez(raw / "train_val_test_idx.npz", train_idx=perm[:12], val_idx=perm[12:18], test_idx=perm[18:])
    off = np.cumsum((0,) + counts)
    rows, cols = [], []
    for m in range(counts[0]):  # each movie: one director, two actors, both directions
        for other in (off[1] + rng.integers(0, counts[1]), off[2] + rng.integers(0, counts[2], 2)):
            for o in np.atleast_1d(other):
                rows += [m, o]
                cols += [o, m]
    sp.save_npz(raw / "adjM.npz", sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(off[-1], off[-1])))


@pytest.mark.slow
def test_a_typed_pyg_data_set_becomes_a_typed_graph(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _imdb_raw(raw, np.random.default_rng(0))
    hg = load_dataset("pyg:IMDB", data_dir=str(tmp_path))
    assert hg.target == "movie" and hg.node_types == ["movie", "director", "actor"]
    assert (hg.train_mask.sum(), hg.val_mask.sum(), hg.test_mask.sum()) == (12, 6, 12)
    assert {"movie:to:director", "director:to:movie", "movie:to:actor", "actor:to:movie"} <= set(hg.edges)
    r = run_cli("partition", "--dataset", "pyg:IMDB", "--data-dir", str(tmp_path), "--parts", "2",
                "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
