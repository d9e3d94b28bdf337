"""scripts/bench_cluster.py without root: a run's bound from its log, the capacity search's doubling and
bisection, and the report's tables and plots from a results file (the lab itself needs root: not here)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_cluster  # noqa: E402
import cluster_report  # noqa: E402


def epoch(e: int, t: float, compute: list, sent: list, recv: list, overlap: list, **extra) -> dict:
    return dict(epoch=e, epoch_time=t, rank_compute_s=compute, rank_wait_s=[t - c for c in compute],
                rank_sent_bytes=sent, rank_recv_bytes=recv, rank_overlap_s=overlap, **extra)


def test_the_bound_is_the_busiest_rank_with_the_wire_its_overlap_did_not_hide(tmp_path):
    log = tmp_path / "run.jsonl"
    records = [epoch(0, 9.0, [5.0, 5.0], [0, 0], [0, 0], [0.0, 0.0], rank_threads=[1, 1], rank_usable_cpus=[0.22, 0.22],
                     prediction={"epoch_s": 2.5}),
               # 1 Gbit/s = 125 MB/s: rank 0 moves 250 MB (2 s) and hid 0.5 s of it; rank 1 moves 125 MB, hid all
               epoch(1, 4.0, [2.0, 2.8], [250e6, 100e6], [100e6, 125e6], [0.5, 1.5], val_acc=0.5, test_acc=0.4),
               epoch(2, 3.0, [2.0, 2.8], [250e6, 100e6], [100e6, 125e6], [0.5, 1.5], eval_time=0.1, val_acc=0.6,
                     test_acc=0.7)]
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    m = bench_cluster.measure(log, warmup=1, rate="1gbit")
    assert m["epoch_s"] == 3.5 and m["epochs_timed"] == 2
    assert m["bound_s"] == pytest.approx(2.0 + (2.0 - 0.5))  # rank 0: 3.5 s; rank 1: 2.8 + max(0, 1 - 1.5) = 2.8
    assert m["predicted_s"] == 2.5 and m["threads"] == [1, 1] and m["test_acc"] == 0.7
    assert m["rank_compute_s"] == [2.0, 2.8]  # each rank's median over the timed epochs
    assert [r["epoch"] for r in m["records"]] == [0, 1, 2] and m["records"][2]["eval_time"] == 0.1
    assert bench_cluster.measure(log, warmup=1, rate="none")["bound_s"] == 2.8  # unshaped links: compute alone


def run_capacity(monkeypatch, limit_nodes, per_node_bytes=None, hosts=(1, 2), start=250_000) -> list:
    """The search against a fake trial: a host trains while its graph is under `limit_nodes` per host, and
    (if given) reports a peak of `per_node_bytes` per node per host, as the lab's memory groups would."""
    tried = []

    def trial(a, res, lab, p, n):
        tried.append((p, n))
        ok = n <= limit_nodes * p
        return {"ok": ok, "peak_bytes": [n / p * per_node_bytes if ok and per_node_bytes else None] * p}

    monkeypatch.setattr(bench_cluster, "trial", trial)
    bench_cluster.capacity(SimpleNamespace(hosts=list(hosts), start=start, memory=2 << 30), None,
                           SimpleNamespace(close=lambda: None))
    return tried


def bracket(tried, p, limit) -> tuple[int, int]:
    mine = [n for q, n in tried if q == p]
    assert all(n % 1000 == 0 for n in mine) and len(mine) < 12
    return max(n for n in mine if n <= limit * p), min(n for n in mine if n > limit * p)


def test_capacity_doubles_then_bisects_to_within_ten_percent(monkeypatch):
    tried = run_capacity(monkeypatch, 1_234_567)  # no peaks known: plain doubling
    for p in (1, 2):
        assert [n for q, n in tried if q == p][:4] == [250_000 * p * 2**k for k in range(4)]
        ok, bad = bracket(tried, p, 1_234_567)
        assert (bad - ok) / ok <= 0.10


def test_capacity_steps_no_further_than_the_measured_peak_says(monkeypatch):
    # 5,000 bytes a node: 2 GiB holds 429k nodes a host, 420k train. Doubling alone would try 250k, 500k, 375k,
    # 437k, 406k, 421k; the peak of 250k says 0.98 * 429k, and the step after a success is at least 10%
    tried = run_capacity(monkeypatch, 420_000, per_node_bytes=5000)
    assert [n for q, n in tried if q == 1] == [250_000, 420_000, 462_000]
    ok, bad = bracket(tried, 2, 420_000)  # 841k (the guess) just fails at 2 hosts: then it bisects
    assert (bad - ok) / ok <= 0.10 and len([n for q, n in tried if q == 2]) <= 5


def test_capacity_when_even_the_first_trial_fails(monkeypatch):
    tried = [n for _, n in run_capacity(monkeypatch, 60_000, hosts=(1,))]
    assert tried[:3] == [250_000, 125_000, 62_000] and max(n for n in tried if n <= 60_000) >= 54_000


def test_report_prints_every_table_and_draws_the_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    graph = "sbm:nodes=1000"
    recs = [{"epoch": e, "epoch_time": 1.0, "val_acc": a, "test_acc": a} for e, a in enumerate((0.5, 0.9, 0.95, 0.95))]
    rows = [{"kind": "fidelity", "dataset": "d", "config": c, "rep": 0, "seq": i, "period": None, "cores": k,
             "threads": [1], "epoch_s": t, "delivered": k and k * 0.99}
            for i, (c, k, t) in enumerate((("pinned", None, 1.0), ("C=0.5", 0.5, 2.1), ("pinned", None, 1.1),
                                           ("C=0.45 --threads 1", 0.45, 2.2), ("pinned", None, 0.9),
                                           ("C=0.45 auto", 0.45, 2.31), ("pinned", None, 1.1)))]
    rows.append({"kind": "reference", "graph": graph, "epochs": 4, "records": recs})
    for p, rate, setting, t in ((1, "none", "exact", 8.0), (2, "1gbit", "exact", 4.4), (2, "1gbit", "auto", 4.1),
                                (4, "1gbit", "exact", 2.5), (4, "1gbit", "auto", 2.0)):
        for rep in range(2):
            rows.append({"kind": "sweep", "graph": graph, "P": p, "rate": rate, "cores": 0.22, "setting": setting,
                         "rep": rep, "tta": rep == 0 and setting != "exact", "epoch_s": t + rep * 0.1, "bound_s": t * 0.9,
                         "predicted_s": None, "records": recs, "wall_s": 720})
    rows += [{"kind": "capacity", "P": p, "nodes": n, "memory": 2**31, "ok": ok, "lost": [] if ok else [0],
              "peak_bytes": [2**30] * p} for p, n, ok in ((1, 200_000, True), (1, 220_000, False), (2, 390_000, True))]
    cluster_report.report(rows, tmp_path)
    out = capsys.readouterr().out
    assert "| C=0.5 | 1 | 2.100 | - | 1.00 | - | 0.495 |" in out  # 2.1 x 0.5 / mean(1.0, 1.1)
    # 2.31 x 0.45 / mean(0.9, 1.1) = 1.0395, against --threads 1's 2.2 x 0.45 / mean(1.1, 0.9) = 0.99
    assert "| C=0.45 auto | 1 | 2.310 | - | 1.04 | 1.05 |" in out
    assert "| 4 | 1gbit | auto | 2.050 | 2.00-2.10 | 3.93 | 0.98 |" in out  # speedup = 8.05 / 2.05
    assert "exact reaches it in 3 epochs" in out and "its runs took 2.00 h (10 runs" in out
    assert "| 2 | 390,000 | - | 1.95 |" in out and "| 1 | 200,000 | 220,000 | 1.00 |" in out
    assert (tmp_path / "bench_cluster_speedup.png").stat().st_size > 0
    assert (tmp_path / "bench_cluster_capacity.png").stat().st_size > 0
