"""Multi-label targets: binary cross-entropy and micro-F1, distributed exactly as one PyG process trains them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnn_dist.data import load_dataset
from gnn_dist.nn import build_model, to_pyg
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow  # multi-rank launches

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
EPOCHS = 6


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    """Communities as label sets: a node carries its community's two labels, each flipped with probability 0.1."""
    rng = np.random.default_rng(3)
    n, k, c = 400, 4, 6
    comm = rng.integers(0, k, n)
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    keep = ((comm[src] == comm[dst]) | (rng.random(3000) < 0.2)) & (src != dst)
    y = np.zeros((n, c), np.float32)
    y[np.arange(n), comm] = 1
    y[np.arange(n), (comm + 1) % c] = 1
    y = np.abs(y - (rng.random((n, c)) < 0.1))
    x = (np.eye(k)[comm] + 0.8 * rng.standard_normal((n, k))).astype(np.float32)
    split = rng.permutation(n)
    masks = {m: np.isin(np.arange(n), split[a:b]) for m, (a, b) in
             {"train_mask": (0, 200), "val_mask": (200, 300), "test_mask": (300, 400)}.items()}
    f = tmp_path_factory.mktemp("ml") / "ml.npz"
    np.savez(f, src=np.r_[src[keep], dst[keep]], dst=np.r_[dst[keep], src[keep]], x=x, y=y, **masks)
    return f


def reference(g) -> tuple[list, float]:
    """One PyG process: the same initial weights, BCE mean over (training node, label), Adam."""
    torch.manual_seed(0)
    ref = to_pyg(build_model("gcn", g.num_features, 16, g.num_classes, layers=2, dropout=0.0)).double()
    x, y = torch.from_numpy(g.x).double(), torch.from_numpy(g.y).double()
    ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()])
    tm, te = torch.from_numpy(g.train_mask), torch.from_numpy(g.test_mask)
    opt = torch.optim.Adam(ref.parameters(), lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(ref(x, ei)[tm], y[tm])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        p, t = ref(x, ei)[te] > 0, y[te] > 0.5
    tp, fp, fn = (p & t).sum(), (p & ~t).sum(), (~p & t).sum()
    return losses, float(2 * tp / (2 * tp + fp + fn))


@pytest.mark.parametrize("world", [1, 2])
def test_multilabel_training_matches_one_pyg_process(graph_file, tmp_path, world):
    g = load_dataset(f"file:{graph_file}")
    assert g.multilabel and g.num_classes == 6
    part, log = tmp_path / "p", tmp_path / "log.jsonl"
    r = run_cli("partition", "--dataset", f"file:{graph_file}", "--parts", str(world), "--out", str(part))
    assert r.returncode == 0, r.stderr
    r = subprocess.run([MPIEXEC, "-n", str(world), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                        "--epochs", str(EPOCHS), "--dropout", "0", "--quiet", "--log", str(log)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    losses, test_f1 = reference(g)
    np.testing.assert_allclose([rec["loss"] for rec in records], losses, rtol=1e-5, atol=1e-6)
    assert abs(records[-1]["test_f1"] - test_f1) < 1e-6 and "val f1" in r.stdout


def test_proteins_rocauc_over_two_ranks_is_ogbs_evaluator_on_the_outputs(tmp_path):
    """ogbn-proteins' layout at 2 ranks: each split's ROC-AUC in the log is the evaluator's on predict's logits."""
    from gnn_dist.train.metrics import roc_auc
    from tests.test_ogb_files import write_proteins

    write_proteins(tmp_path, tasks=6, n=300, e=1500)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    part, log, model = tmp_path / "p", tmp_path / "log.jsonl", tmp_path / "m.pt"
    r = run_cli("partition", "--dataset", "ogb:ogbn-proteins", "--data-dir", str(tmp_path), "--parts", "2", "--out",
                str(part), env=env)
    assert r.returncode == 0, r.stderr
    for cmd in (["train", "--epochs", "8", "--quiet", "--log", str(log), "--save-model", str(model)],
                ["predict", "--model-file", str(model), "--out", str(tmp_path / "o.npy")]):
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", *cmd, "--partition", str(part)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-2000:]
    final = json.loads(log.read_text().splitlines()[-1])
    g = load_dataset("ogb:ogbn-proteins", data_dir=str(tmp_path))
    logits = np.load(tmp_path / "o.npy")
    for name, mask in (("train", g.train_mask), ("val", g.val_mask), ("test", g.test_mask)):
        assert abs(final[f"{name}_rocauc"] - roc_auc(g.y[mask], logits[mask])) < 1e-6, name
