"""Link prediction: held-out pairs leave the partitioned graph, and distributed training ranks them well."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gnn_dist.train.link import auc
from partition.store import read_part
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow  # multi-rank launches: `pytest -m 'not slow'` skips them

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def test_auc_counts_ties_half():
    assert auc(np.array([3.0, 2.0]), np.array([1.0, 0.0])) == 1.0
    assert auc(np.array([1.0]), np.array([1.0])) == 0.5
    assert auc(np.array([0.0, 2.0]), np.array([1.0])) == 0.5


def test_held_out_edges_and_distributed_training(tmp_path):
    out = tmp_path / "lp"
    r = run_cli("partition", "--dataset", "sbm:nodes=3000,classes=6,avg_degree=8,homophily=0.9,features=16,seed=3",
                "--parts", "2", "--out", str(out), "--link-split", "0.05,0.1")
    assert r.returncode == 0, r.stderr
    held = np.load(out / "link_edges.npz")
    n = 3000
    gone = set((np.minimum(held["test_src"], held["test_dst"]) * n + np.maximum(held["test_src"], held["test_dst"])).tolist())
    assert len(gone) > 500 and held["test_neg_src"].shape == held["test_src"].shape
    for p in range(2):  # no held-out pair, in either direction, is left for message passing
        plan = read_part(out, p)
        dst = plan.global_ids[np.repeat(np.arange(plan.num_inner), np.diff(plan.indptr))]
        src = plan.global_ids[plan.indices]
        assert not gone & set((np.minimum(src, dst) * n + np.maximum(src, dst)).tolist())
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(out),
                        "--task", "link", "--epochs", "40", "--hidden", "32", "--dropout", "0", "--quiet"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    test_auc = float(r.stdout.strip().split("test auc")[-1])
    assert test_auc > 0.75, r.stdout  # homophilous SBM: a trained GCN ranks held-out edges well (random: 0.5)


def test_link_task_needs_held_out_edges(tmp_path):
    from tests.conftest import cli_partition

    part = cli_partition(tmp_path, "karate", 1)
    r = run_cli("train", "--partition", str(part), "--task", "link", "--epochs", "1")
    assert r.returncode == 2 and "partition it with --link-split" in r.stderr, r.stderr


def test_link_task_honours_checkpoints_schedules_and_early_stop(tmp_path):
    """The one training loop: --task link keeps the flags node classification keeps, on validation AUC."""
    import json

    out = tmp_path / "lp"
    r = run_cli("partition", "--dataset", "sbm:nodes=600,classes=4,avg_degree=6,homophily=0.9,features=8,seed=2",
                "--parts", "1", "--out", str(out), "--link-split", "0.1,0.1")
    assert r.returncode == 0, r.stderr
    log, ck = tmp_path / "log.jsonl", tmp_path / "ck"
    r = run_cli("train", "--partition", str(out), "--task", "link", "--epochs", "200", "--hidden", "16", "--quiet",
                "--lr-schedule", "cosine", "--early-stop", "3", "--log", str(log), "--checkpoint-dir", str(ck),
                "--checkpoint-every", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(records) < 200 and "early stop after epoch" in r.stderr and "weights of best epoch" in r.stdout
    assert records[1]["lr"] < records[0]["lr"] < 0.01 and all("val_auc" in rec for rec in records)
    assert (ck / "checkpoint.pt").is_file() and (ck / "best.pt").is_file()

