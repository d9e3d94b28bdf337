"""A part's reads in its own order (partition.reuse): the reuse curve, and what it says stays in cache
against a least-recently-used cache simulated read by read."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition.reuse import cached_reads, read_order, reuse_curve


def test_the_reads_and_their_reuse_times_by_hand():
    indptr, indices = np.array([0, 2, 3, 5]), np.array([1, 2, 0, 0, 1])
    rows, cols = read_order(indptr, indices)
    assert rows.tolist() == [0, 0, 0, 1, 1, 2, 2, 2] and cols.tolist() == [1, 2, 0, 0, 1, 0, 1, 2]  # self loops last
    # row 0 is read at 2, 3, 5 (times 1, 2); row 1 at 0, 4, 6 (4, 2); row 2 at 1, 7 (6): at most 1, 2, 4, 8
    assert reuse_curve(cols) == [1, 3, 4, 5]
    assert reuse_curve(np.array([9, 5, 9])) == [0, 1, 1] and reuse_curve(np.array([7])) == [0]
    assert reuse_curve(np.array([], dtype=np.int64)) == [0]


def test_a_cyclic_sweep_hits_only_when_the_cache_holds_the_whole_cycle():
    """m rows read in turn k times: every read after the first sweep is m reads after its row's last, with
    m - 1 other rows between. A least-recently-used cache of fewer rows misses them all; of more, hits them."""
    m, k = 1024, 8
    curve = reuse_curve(np.tile(np.arange(m), k))
    assert curve[10] == m * k - m and curve[9] == 0
    assert cached_reads(curve, m * k, m // 2) == 0.0
    assert cached_reads(curve, m * k, 2 * m) == m * k - m
    assert cached_reads(curve, m * k, 0) == 0.0 and cached_reads([], 0, 100) == 0.0


@pytest.mark.parametrize("spec", ["grid:width=60,height=60", "grid:width=60,height=60,shuffle=1",
                                  "sbm:nodes=3000,avg_degree=8,classes=6", "rmat:scale=12,edges=30000,seed=1"])
def test_the_estimate_is_close_to_a_cache_simulated_read_by_read(spec):
    g = load_dataset(spec)
    _, cols = read_order(g.indptr, g.indices)
    curve = reuse_curve(cols)
    for size in (64, 512, 2048):
        cache, hits = OrderedDict(), 0
        for c in cols.tolist():
            if c in cache:
                hits += 1
                cache.move_to_end(c)
            else:
                cache[c] = None
                if len(cache) > size:
                    cache.popitem(last=False)
        estimate = cached_reads(curve, cols.size, size)
        assert abs(estimate - hits) <= 0.06 * cols.size, (size, estimate, hits, cols.size)


@pytest.mark.slow
def test_sparse_locality_prices_a_part_by_its_ladder(tmp_path):
    """scripts/sparse_locality.py --ladder on a small partition (20 s: it times a 128 MB rung): a 40-wide
    grid's part reads a row again within some 200 reads, inside the smallest rung (512 rows of 64 bytes), so
    every rung holds all but each row's first read; each repeat prints the part's rates and the prediction."""
    import subprocess
    import sys

    from tests.conftest import ROOT, run_cli

    r = run_cli("partition", "--dataset", "grid:width=40,height=40", "--parts", "2", "--out", str(tmp_path / "p"))
    assert r.returncode == 0, r.stderr
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sparse_locality.py"), str(tmp_path / "p"),
                          "--part", "1", "--width", "16", "--ladder", "--repeat", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    head, *lines = out.stdout.strip().splitlines()
    fractions = [float(x) for x in head.rsplit("rows: ", 1)[1].split(", ")]
    assert fractions == sorted(fractions) and fractions[-1] - fractions[0] <= 0.02 and 0.6 < fractions[0] < 0.9
    assert len(lines) == 2 and all("as built" in x and "predicted" in x for x in lines)


def test_sparse_locality_refuses_bad_arguments_in_one_line(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = str(ROOT / "scripts" / "sparse_locality.py")
    for args, needle in (([str(tmp_path), "--width", "0"], "a whole number from 1 to 4096"),
                         ([str(tmp_path), "--repeat", "-1"], "a whole number from 0 to 1000"),
                         ([str(tmp_path / "gone")], "sparse_locality:")):
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
