"""Hostile or broken input files: one line and exit 2 before any large allocation, and nothing written.

Sparse ids in an edge list are compacted (the partition keeps the input's ids), empty files, ids that are
not integers, labels beyond the classes or missing where a mask needs them, and PyG-Temporal files whose
fields disagree are each refused in one line.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT, one_error_line, write_npz_graph

BIG = 2**31 + 5  # one such id made `partition` allocate 2^31 counters (OOM-killed at 23.7 GB)


def _partition(tmp_path, spec: str, parts: int = 2, *extra: str, limit_gb: float | None = None):
    """`gnn-dist partition` on SPEC into tmp_path/o; under an address-space limit if asked, so that an
    allocation by the largest id fails fast here instead of exhausting the machine."""
    def cap():
        if limit_gb:
            resource.setrlimit(resource.RLIMIT_AS, (int(limit_gb * 2**30),) * 2)

    return subprocess.run([sys.executable, "-m", "gnn_dist", "partition", "--dataset", spec, "--parts", str(parts),
                           "--out", str(tmp_path / "o"), *extra], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, preexec_fn=cap)


def _partition_here(tmp_path, spec: str, *extra: str) -> subprocess.CompletedProcess:
    """`gnn-dist partition` through the CLI's own main in this process (its one-line errors and exit codes are
    main's), as a CompletedProcess for `one_error_line`: no interpreter start per bad file."""
    import contextlib
    import io

    from gnn_dist.cli.main import main

    argv = ["partition", "--dataset", spec, "--parts", "2", "--out", str(tmp_path / "o"), *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def _nothing_written(tmp_path):
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_sparse_ids_are_compacted_and_kept(tmp_path):
    edges = np.array([[7, 12], [12, 40], [40, BIG], [BIG, 7], [12, 7]])
    np.savetxt(tmp_path / "e.csv", edges, fmt="%d", delimiter=",")
    r = _partition(tmp_path, f"edges:{tmp_path / 'e.csv'}", limit_gb=3)
    assert r.returncode == 0, r.stderr[-2000:]
    notes = [ln for ln in r.stderr.splitlines() if "relabelled" in ln]
    assert len(notes) == 1 and f"node ids up to {BIG} for 4 distinct nodes" in notes[0], r.stderr
    from partition.book import PartitionBook
    from partition.store import verify_partition

    meta = verify_partition(tmp_path / "o")
    assert meta["num_nodes"] == 4 and meta["num_edges"] == 5 and meta["relabelled"]
    book = PartitionBook(tmp_path / "o")
    assert book.original_ids.tolist() == [7, 12, 40, BIG]
    assert book.to_original([3, 0]).tolist() == [BIG, 7]
    r = _partition(tmp_path, f"edges:{tmp_path / 'e.csv'}?relabel=false", 2, "--force", limit_gb=3)
    one_error_line(r, "?relabel=false", strict=False)
    assert "node id 2147483653 is beyond twice the 4 distinct ids" in r.stderr


def test_dense_ids_stay_as_they_are(tmp_path):
    """A compact list (every id below twice the distinct count) is read as before: no relabelling, no ids file."""
    from gnn_dist.data import load_dataset

    np.savetxt(tmp_path / "e.csv", [[0, 1], [1, 2], [2, 0], [5, 1]], fmt="%d", delimiter=",")
    g = load_dataset(f"edges:{tmp_path / 'e.csv'}")
    assert g.num_nodes == 6 and g.original_ids is None
    g = load_dataset(f"edges:{tmp_path / 'e.csv'}?nodes=4")  # 5 is beyond the 4 nodes declared: compacted
    assert g.num_nodes == 4 and g.original_ids.tolist() == [0, 1, 2, 5]
    assert sorted(zip(*g.edge_index())) == [(0, 1), (1, 2), (2, 0), (3, 1)]


def test_sparse_chunks_build_the_same_graph_as_dense_ones(tmp_path):
    """Ids spread over 2^40 in several chunks (sparse counting from the first) give the dense graph, relabelled."""
    from gnn_dist.data import load_dataset

    rng = np.random.default_rng(0)
    n = 500
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    used = np.unique(np.r_[src, dst])
    ids = np.sort(rng.choice(2**40, n, replace=False))
    for k, part in enumerate(np.array_split(np.arange(src.shape[0]), 3)):
        np.save(tmp_path / f"c{k}.npy", np.stack([ids[src[part]], ids[dst[part]]], 1))
    g = load_dataset(f"edges:{tmp_path}")
    assert np.array_equal(g.original_ids, ids[used])
    new = np.searchsorted(used, np.arange(n))
    expect = sorted(zip(new[src].tolist(), new[dst].tolist()))
    assert sorted(zip(*(a.tolist() for a in g.edge_index()))) == expect


def test_ids_counted_sparsely_then_dense_enough_stay_as_they_are(tmp_path, monkeypatch):
    """A first chunk whose large id switches counting to sparse, and later chunks that fill the ids in: no
    relabelling (the largest id is within twice the distinct ones), the graph of the same edges in one chunk."""
    from gnn_dist.data import load_dataset
    from partition import node_ids

    monkeypatch.setattr(node_ids, "DENSE_FLOOR", 16)
    np.save(tmp_path / "a.npy", np.array([[0, 40]]))  # 41 > max(16, 2 * 2 ids): counted sparsely from here
    np.save(tmp_path / "b.npy", np.stack([np.arange(40), np.arange(1, 41)], 1))  # every id up to 40
    g = load_dataset(f"edges:{tmp_path}")
    assert g.num_nodes == 41 and g.original_ids is None
    edges = np.r_[np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")]
    assert sorted(zip(*(a.tolist() for a in g.edge_index()))) == sorted(map(tuple, edges.tolist()))


@pytest.mark.parametrize("name,content,needle", [
    ("empty.csv", "", "holds no edges"),
    ("header.csv", "src,dst\n", "holds no edges"),
    ("float.csv", "0,1\n2,1.5\n", "a node id is not an integer (could not convert string '1.5'"),
    ("huge.csv", "0,1\n2,99999999999999999999\n", "a node id is not an integer"),
    ("neg.csv", "0,1\n2,-3\n", "negative node id -3"),
    ("float.npy", np.array([[0.0, 1.0], [2.0, 1.5]]), "node id 1.5 is not an integer"),
    ("big.npy", np.array([[0, 1], [2, 2**63 + 5]], np.uint64), "is too large (ids must fit in int64)"),
])
def test_bad_edge_lists_are_one_line(tmp_path, name, content, needle):
    f = tmp_path / name
    np.save(f, content) if isinstance(content, np.ndarray) else f.write_text(content)
    r = _partition_here(tmp_path, f"edges:{f}")
    one_error_line(r, needle, strict=False)
    _nothing_written(tmp_path)


def test_empty_files_are_one_line(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "empty.json").write_text("")
    for spec, needle, extra in ((f"file:{tmp_path / 'empty.npz'}", "is empty", ()),
                                (f"hfile:{tmp_path / 'empty.npz'}", "is empty", ()),
                                (f"json:{tmp_path / 'empty.json'}", "is not valid JSON", ()),
                                ("sbm:nodes=60", "cannot be read", ("--assignment", str(tmp_path / "empty.npy")))):
        r = _partition_here(tmp_path, spec, *extra)
        one_error_line(r, needle, strict=False)
        _nothing_written(tmp_path)


def test_a_file_that_is_not_an_npz_is_one_line(tmp_path):
    """An edge list, or a lone .npy, given to file: (which np.load would read as pickled data, or as one
    array without .files): one line that says what file: reads and where an edge list goes."""
    (tmp_path / "e.txt").write_text("# my edges\nsrc dst\n0 1\n1 2\n")
    np.save(tmp_path / "a.npy", np.arange(4))
    for name in ("e.txt", "a.npy"):
        r = _partition_here(tmp_path, f"file:{tmp_path / name}")
        one_error_line(r, f"is not an .npz archive (file: reads the project's or gnn-benchmark's npz layout; an edge "
                          f"list is edges:{tmp_path / name}", strict=False)
        _nothing_written(tmp_path)


def _labelled(tmp_path, y, **extra):
    n = len(y)
    x = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    return write_npz_graph(tmp_path / "g.npz", np.arange(n), (np.arange(n) + 1) % n, x, y, **extra)


@pytest.mark.parametrize("change,extra,needle", [
    ({5: 99}, {}, "label 99 at node 5 makes 100 classes, of which only 8 have a node"),
    ({5: 9}, {"num_classes": 7}, "label 9 at node 5 is out of range for 7 classes"),
    ({5: -2}, {}, "label -2 at node 5 is negative"),
    ({5: -1}, {"train_mask": np.arange(40) < 20}, "node 5 is in the train mask but has no label (-1)"),
    ({5: 1.5}, {}, "label 1.5 at node 5 is not a class number"),
])
def test_labels_out_of_range_are_one_line(tmp_path, change, extra, needle):
    y = (np.arange(40) % 7).astype(np.float64 if any(isinstance(v, float) for v in change.values()) else np.int64)
    for node, label in change.items():
        y[node] = label
    r = _partition_here(tmp_path, f"file:{_labelled(tmp_path, y, **extra)}")
    one_error_line(r, needle, strict=False)
    _nothing_written(tmp_path)


def test_unlabelled_nodes_join_no_drawn_split(tmp_path):
    """-1 in a file without masks means 'no label': the drawn split leaves such nodes out of every mask."""
    from gnn_dist.data import load_dataset

    y = np.arange(40) % 7
    y[[3, 5, 11]] = -1
    g = load_dataset(f"file:{_labelled(tmp_path, y)}?split=0.5,0.25")
    assert g.num_classes == 7
    for m in (g.train_mask, g.val_mask, g.test_mask):
        assert not m[[3, 5, 11]].any()
    assert int(g.train_mask.sum()) == round(0.5 * 37)


def _temporal(tmp_path, periods: int, stated: int, weights: int):
    edges = [[i, (i + 1) % 5] for i in range(5)]
    d = {"edges": edges, "weights": [1.0] * weights, "time_periods": stated}
    for t in range(periods):
        d[str(t)] = {"y": [float(t + i) for i in range(5)]}
    (tmp_path / "w.json").write_text(json.dumps(d))
    return tmp_path / "w.json"


@pytest.mark.parametrize("periods,stated,weights,needle", [
    (12, 8, 5, "time_periods is 8 but the file holds 12 periods"),
    (12, 15, 5, "time_periods is 15 but the file holds 12 periods"),
    (12, 12, 4, "'weights' has 4 entries for 5 edges"),
])
def test_disagreeing_temporal_fields_are_one_line(tmp_path, periods, stated, weights, needle):
    f = _temporal(tmp_path, periods, stated, weights)
    r = _partition_here(tmp_path, f"json:{f}?lags=2")
    one_error_line(r, needle, strict=False)
    _nothing_written(tmp_path)
