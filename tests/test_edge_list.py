"""Chunked edge-list files build the same CSR as one edge array, and partition through the CLI."""
from __future__ import annotations

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition.errors import DataError
from tests.conftest import run_cli


def test_chunks_build_the_same_graph(small_sbm, tmp_path):
    src, dst = small_sbm.edge_index()
    cut = np.array_split(np.random.default_rng(0).permutation(src.shape[0]), 4)
    folder = tmp_path / "edges"
    folder.mkdir()
    np.savetxt(folder / "a.csv", np.stack([src[cut[0]], dst[cut[0]]], 1), fmt="%d", delimiter=",", header="src,dst",
               comments="")
    np.savetxt(folder / "b.tsv", np.stack([src[cut[1]], dst[cut[1]]], 1), fmt="%d", delimiter="\t")
    np.save(folder / "c.npy", np.stack([src[cut[2]], dst[cut[2]]], 1))
    np.savez(folder / "d.npz", src=src[cut[3]], dst=dst[cut[3]])
    g = load_dataset(f"edges:{folder}")
    assert g.num_nodes == small_sbm.num_nodes and np.array_equal(g.indptr, small_sbm.indptr)
    for v in range(0, g.num_nodes, 97):  # same in-neighbours per row
        assert np.array_equal(np.sort(g.indices[g.indptr[v]:g.indptr[v + 1]]),
                              np.sort(small_sbm.indices[small_sbm.indptr[v]:small_sbm.indptr[v + 1]]))
    r = run_cli("partition", "--dataset", f"edges:{folder}", "--parts", "3", "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr


def test_bad_chunks(tmp_path):
    (tmp_path / "x.csv").write_text("0,1\n2,-3\n")
    with pytest.raises(DataError, match="negative node id -3"):
        load_dataset(f"edges:{tmp_path / 'x.csv'}")
    (tmp_path / "y.csv").write_text("0,1\n2,oops\n")
    with pytest.raises(DataError, match="not an integer"):
        load_dataset(f"edges:{tmp_path / 'y.csv'}")
    with pytest.raises(DataError, match="no files found"):
        load_dataset(f"edges:{tmp_path / 'nothing*.csv'}")


@pytest.mark.parametrize("text", ["# my edges\nsrc dst\n0 1\n1 2\n", "\n% note\n\nsrc,dst\n# inside\n0,1\n1,2\n",
                                  "src dst\n0 1\n1 2\n", "# only a comment\n0 1\n1 2\n",
                                  "  # indented\nsrc dst\n0 1\n1 2\n"])
def test_comments_blanks_and_a_header_in_any_order(tmp_path, text):
    f = tmp_path / ("e.csv" if "," in text else "e.txt")
    f.write_text(text)
    g = load_dataset(f"edges:{f}")
    assert g.num_nodes == 3 and g.num_edges == 2
