"""The same command and --seed give the same partition, bit for bit, for every --method.

Mt-KaHyPar's default preset races its threads (the same seed gave three different halos in three runs);
its deterministic preset, the default here, does not. A shuffled 40x40 grid is big enough for the
default preset to differ between runs on 2 threads, and quick.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from partition import assign_parts
from partition.graph import Graph
from tests.conftest import run_cli

METHODS = [("metis", {"objective": "cut"}), ("metis", {"objective": "vol"}), ("mtkahypar", {"objective": "cut"}),
           ("mtkahypar", {"objective": "vol"}), ("kahip", {"mode": "eco"}), ("random", {}), ("contiguous", {}),
           ("ldg", {"order": "bfs"}), ("fennel", {"order": "random", "passes": 2})]


def grid_edges(side: int = 40, seed: int = 0) -> np.ndarray:
    """Both directions of a side x side grid's edges, node ids shuffled (so id order carries no locality)."""
    ids = np.random.default_rng(seed).permutation(side * side).reshape(side, side)
    a = np.r_[ids[:, :-1].ravel(), ids[:-1, :].ravel()]
    b = np.r_[ids[:, 1:].ravel(), ids[1:, :].ravel()]
    return np.stack([np.r_[a, b], np.r_[b, a]], axis=1)


@pytest.fixture(scope="module")
def grid() -> Graph:
    e = grid_edges()
    n = int(e.max()) + 1
    none = np.zeros(n, bool)
    return Graph.from_edges(e[:, 0], e[:, 1], n, np.zeros((n, 0), np.float32), np.full(n, -1), none, none, none)


@pytest.mark.parametrize("method,kw", METHODS, ids=[f"{m}-{'-'.join(map(str, k.values()))}" for m, k in METHODS])
def test_two_runs_give_the_same_parts(grid, method, kw):
    if method in ("mtkahypar", "kahip"):
        pytest.importorskip(method)
    first = assign_parts(grid, 8, method, seed=3, **kw)
    assert np.array_equal(assign_parts(grid, 8, method, seed=3, **kw), first)


def _partition_grid(tmp_path, out, *extra: str) -> list:
    np.savetxt(tmp_path / "grid.csv", grid_edges(), fmt="%d", delimiter=",")
    return ["partition", "--dataset", f"edges:{tmp_path / 'grid.csv'}", "--parts", "8", "--method", "mtkahypar",
            "--objective", "vol", "--seed", "3", "--out", str(out), *extra]


def test_the_command_writes_the_same_node_map_twice(tmp_path, capsys):
    """One command twice: identical node_map.npy; the racing preset only when asked, and partition.json says so."""
    pytest.importorskip("mtkahypar")
    from gnn_dist.cli.main import main

    maps = []
    for k, extra in enumerate(((), (), ("--fast-nondeterministic",))):
        out = tmp_path / f"p{k}"
        assert main(_partition_grid(tmp_path, out, *extra)) == 0, capsys.readouterr().err
        maps.append((out / "node_map.npy").read_bytes())
        assert json.loads((out / "partition.json").read_text())["deterministic"] is not bool(extra)
    assert maps[0] == maps[1]
    assert main(["partition", "--dataset", "sbm:nodes=60", "--parts", "2", "--fast-nondeterministic",
                 "--out", str(tmp_path / "m")]) == 2
    assert "--fast-nondeterministic applies to --method mtkahypar" in capsys.readouterr().err


@pytest.mark.slow
def test_two_processes_write_the_same_node_map(tmp_path):
    pytest.importorskip("mtkahypar")
    maps = []
    for k in range(2):
        r = run_cli(*_partition_grid(tmp_path, tmp_path / f"p{k}"))
        assert r.returncode == 0, r.stderr
        maps.append((tmp_path / f"p{k}" / "node_map.npy").read_bytes())
    assert maps[0] == maps[1]
