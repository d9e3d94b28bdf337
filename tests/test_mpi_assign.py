"""`mpiexec -n R gnn-dist assign`: streaming over ranks that each read some chunks, then `partition --assignment`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partition.edgelist import load_edge_list
from partition.methods import undirected_adjacency
from partition.streaming import stream_parts
from tests.conftest import one_error_line, run_cli

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


@pytest.fixture(scope="module")
def chunks(small_sbm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunks")
    src, dst = small_sbm.edge_index()
    for i, idx in enumerate(np.array_split(np.random.default_rng(0).permutation(src.shape[0]), 5)):
        np.save(folder / f"part-{i}.npy", np.stack([src[idx], dst[idx]], 1))
    return folder


def _assign(ranks: int, chunks: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "gnn_dist", "assign", "--edges",
                           str(chunks), "--out", str(out), *extra], capture_output=True, text=True, timeout=180)


def _cut(adj, parts) -> float:
    rows = np.repeat(np.arange(adj.shape[0]), np.diff(adj.indptr))
    return float(adj.data[parts[rows] != parts[adj.indices]].sum() / adj.data.sum())


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_one_rank_is_the_single_process_streamer(chunks, tmp_path):
    r = _assign(1, chunks, tmp_path / "a.npy", "--parts", "4", "--passes", "2", "--seed", "5")
    assert r.returncode == 0, r.stderr[-2000:]
    adj = undirected_adjacency(load_edge_list(str(chunks)))
    assert np.array_equal(np.load(tmp_path / "a.npy"), stream_parts(adj, 4, "fennel", seed=5, passes=2, order="random"))


def test_three_ranks_cut_as_well_and_build_a_partition(chunks, small_sbm, tmp_path):
    parts_file = tmp_path / "parts.npy"
    r = _assign(3, chunks, parts_file, "--parts", "4", "--passes", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cut fraction" in r.stdout and len(r.stdout.split("peak RSS per rank MB ")[1].split("/")) == 3
    parts = np.load(parts_file)
    adj = undirected_adjacency(small_sbm)
    counts = np.bincount(parts, minlength=4)
    assert parts.shape == (small_sbm.num_nodes,) and counts.min() > 0
    assert counts.max() <= 1.06 * small_sbm.num_nodes / 4 + 3 * 64  # capacity plus one round of overshoot
    alone = _cut(adj, stream_parts(adj, 4, "fennel", seed=0, passes=2, order="random"))
    random = _cut(adj, np.random.default_rng(0).integers(0, 4, small_sbm.num_nodes))
    assert _cut(adj, parts) < min(1.15 * alone, 0.7 * random)
    out = tmp_path / "p"
    r = run_cli("partition", "--dataset", f"edges:{chunks}", "--parts", "4", "--assignment", str(parts_file),
                "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "partition.json").read_text())
    assert meta["method"] == "assignment" and [p["inner"] for p in meta["parts"]] == counts.tolist()


@pytest.mark.slow  # multi-rank: the fast subset keeps a handful of launches (tests/conftest.py)
def test_a_bad_chunk_fails_every_rank_with_one_line(chunks, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in sorted(chunks.iterdir()):
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "part-1.npy").write_bytes(b"not an array")  # read by rank 1 of 2
    r = _assign(2, bad, tmp_path / "x.npy", "--parts", "4")
    assert r.returncode != 0 and not (tmp_path / "x.npy").exists()
    errors = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert errors and all("rank 1: edge list chunk" in ln and "part-1.npy" in ln for ln in errors), r.stderr
    assert "Traceback" not in r.stderr
    r = _assign(2, chunks, tmp_path / "y.npy", "--parts", "4", "--nodes", "10")
    assert r.returncode != 0 and "out of range for --nodes 10" in r.stderr


def test_partition_rejects_a_mismatched_assignment(chunks, tmp_path):
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros(7, np.int32))
    r = run_cli("partition", "--dataset", f"edges:{chunks}", "--parts", "2", "--assignment", str(wrong),
                "--out", str(tmp_path / "p"))
    assert r.returncode == 2 and "has 7 entries but the graph has 3000 nodes" in r.stderr, r.stderr
    r = run_cli("partition", "--dataset", f"edges:{chunks}", "--parts", "2", "--assignment", str(tmp_path / "none.npy"),
                "--out", str(tmp_path / "p"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    for flags, needle in ((("--objective", "vol"), "--objective vol would do nothing"),
                          (("--method", "kahip"), "--method kahip would do nothing"),
                          (("--balance", "nodes"), "--balance nodes would do nothing")):
        r = run_cli("partition", "--dataset", f"edges:{chunks}", "--parts", "2", "--assignment", str(wrong),
                    *flags, "--out", str(tmp_path / "p"))
        one_error_line(r, needle)
