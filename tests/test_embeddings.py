"""Learnable input rows for nodes without features, distributed exactly as one PyG process trains them.

Rows live with their owner (no broadcast, no all-reduce: their halo gradients come back through the
exchange), start from a counter hash a one-process twin can draw, and are gathered whole into
checkpoints and saved models, so a run can resume, and predict, on another number of ranks.
"""
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
from gnn_dist.nn.embedding import hash_normal
from gnn_dist.nn.typed import PyGTypedGNN, TypedGNN
from tests.conftest import ROOT, run_cli

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
EPOCHS, DIM = 6, 8


def test_hash_rows_are_standard_normal_and_depend_on_seed_id_and_column_only():
    ids = torch.arange(20000)
    t = hash_normal(ids, 16, seed=3)
    assert abs(float(t.mean())) < 0.01 and abs(float(t.std()) - 1) < 0.01
    assert torch.equal(hash_normal(ids[[7, 19999, 3]], 16, seed=3), t[[7, 19999, 3]])  # any subset, any order
    assert not torch.equal(hash_normal(ids[:5], 16, seed=4), t[:5])
    assert float(np.corrcoef(t[:, 0], t[:, 1])[0, 1]) < 0.03  # columns are not copies of each other


def test_heterodata_types_without_x_become_featureless_types():
    from torch_geometric.data import HeteroData

    from gnn_dist.data.typed import from_pyg

    data = HeteroData()
    data["paper"].x, data["paper"].y = torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 1])
    data["author"].num_nodes = 4  # as PyG's OGB_MAG gives authors: a count, no x
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 3], [1, 4]])
    hg = from_pyg(data, "paper")
    assert hg.x["author"].shape == (4, 0) and hg.x["paper"].shape == (5, 3)


def _train(world: int, part: Path, log: Path, *extra: str) -> subprocess.CompletedProcess:
    r = subprocess.run([MPIEXEC, "-n", str(world), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                        "--dropout", "0", "--quiet", "--log", str(log), "--embedding-dim", str(DIM), *extra],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def _losses(log: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in log.read_text().splitlines() if "loss" in x]


def _partition(spec: str, world: int, out: Path) -> Path:
    r = run_cli("partition", "--dataset", spec, "--parts", str(world), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def featureless(tmp_path_factory):
    """Two communities and labels that follow them; no features at all: only the structure can tell."""
    rng = np.random.default_rng(5)
    n = 360
    comm = rng.integers(0, 3, n)
    src, dst = rng.integers(0, n, 2400), rng.integers(0, n, 2400)
    keep = ((comm[src] == comm[dst]) | (rng.random(2400) < 0.15)) & (src != dst)
    split = rng.permutation(n)
    masks = {m: np.isin(np.arange(n), split[a:b]) for m, (a, b) in
             {"train_mask": (0, 120), "val_mask": (120, 240), "test_mask": (240, 360)}.items()}
    f = tmp_path_factory.mktemp("emb") / "g.npz"
    np.savez(f, src=np.r_[src[keep], dst[keep]], dst=np.r_[dst[keep], src[keep]], x=np.zeros((n, 0), np.float32),
             y=comm, **masks)
    return f


def reference(g) -> tuple[list[float], torch.Tensor]:
    """One PyG process: GCN on a learnable table drawn as the runtime draws it; losses and final logits."""
    torch.manual_seed(0)
    ref = to_pyg(build_model("gcn", DIM, 16, g.num_classes, layers=2, dropout=0.0)).double()
    table = torch.nn.Parameter(hash_normal(torch.arange(g.num_nodes), DIM, seed=0).double())
    ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()])
    y, tm = torch.from_numpy(g.y), torch.from_numpy(g.train_mask)
    opt = torch.optim.Adam([*ref.parameters(), table], lr=0.01, weight_decay=5e-4)
    losses = []
    for _ in range(EPOCHS):
        opt.zero_grad()
        loss = F.cross_entropy(ref(table, ei)[tm], y[tm])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        return losses, ref(table, ei)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2])  # 4 ranks: the resume test below trains its last epochs there
def test_embedding_training_matches_one_pyg_process(featureless, tmp_path, world):
    g = load_dataset(f"file:{featureless}")
    assert g.num_features == 0
    part = _partition(f"file:{featureless}", world, tmp_path / "p")
    r = _train(world, part, tmp_path / "log.jsonl", "--epochs", str(EPOCHS))
    assert f"learnable {DIM}-wide input row per node" in r.stderr
    losses, _ = reference(g)
    np.testing.assert_allclose(_losses(tmp_path / "log.jsonl"), losses, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_embedding_checkpoint_resumes_and_predicts_on_another_rank_count(featureless, tmp_path):
    """Train 3 epochs on 2 ranks, resume to 6 on 4 ranks, predict on 2: all as one PyG process would."""
    g = load_dataset(f"file:{featureless}")
    p2, p4 = (_partition(f"file:{featureless}", w, tmp_path / f"p{w}") for w in (2, 4))
    ck, model = tmp_path / "ck", tmp_path / "m.pt"
    _train(2, p2, tmp_path / "a.jsonl", "--epochs", "3", "--checkpoint-dir", str(ck), "--checkpoint-every", "3")
    r = _train(4, p4, tmp_path / "b.jsonl", "--epochs", str(EPOCHS), "--checkpoint-dir", str(ck), "--resume",
               "--save-model", str(model))
    assert "resumed on 4 ranks from a checkpoint of 2: model and optimiser restored exactly" in r.stderr
    losses, logits = reference(g)
    np.testing.assert_allclose(_losses(tmp_path / "a.jsonl") + _losses(tmp_path / "b.jsonl"), losses, rtol=1e-5,
                               atol=1e-6)
    state = torch.load(model, weights_only=True)["state"]
    assert state["embeddings.nodes.weight"].shape == (g.num_nodes, DIM)  # whole, in global id order
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "predict", "--partition", str(p2),
                        "--model-file", str(model), "--out", str(tmp_path / "o.npy")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), logits.float().numpy(), rtol=1e-4, atol=1e-5)
    # the same file from Python: gd.load_model gives each rank its own rows of the table
    np.save(tmp_path / "ref.npy", logits.float().numpy())
    (tmp_path / "load.py").write_text(LOAD_SCRIPT)
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(tmp_path / "load.py"), str(p2), str(model),
                        str(tmp_path / "ref.npy")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.count("rows match") == 2, r.stdout + r.stderr[-2000:]


LOAD_SCRIPT = """
import sys
import numpy as np
import torch
import gnn_dist as gd

with gd.init() as ctx:
    part = gd.load_partition(sys.argv[1], ctx)
    model = gd.load_model(sys.argv[2], part, ctx).eval()
    with torch.no_grad():
        out = model(part.x, part)
    ref = np.load(sys.argv[3])[np.asarray(part.global_ids[: part.num_inner])]
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)
    print(f"rank {ctx.rank}: {len(ref)} rows match")
"""


@pytest.mark.slow
def test_featureless_node_types_match_one_pyg_process(tmp_path):
    """An hfile whose authors and venues have no features: R-GCN at 2 ranks against PyG's RGCNConv."""
    hg = load_dataset("hsbm:papers=400,authors=300,venues=6,classes=3,seed=2")
    arrays = {"node_types": np.array(hg.node_types), "target": np.array(hg.target), "y": hg.y,
              "edge_types": np.array([":".join(e) for e in hg.edge_types]), "x:paper": hg.x["paper"],
              "num_nodes": np.array([hg.num_nodes[t] for t in hg.node_types]), "train_mask": hg.train_mask,
              "val_mask": hg.val_mask, "test_mask": hg.test_mask}
    arrays.update({f"edge_index:{':'.join(e)}": np.stack(hg.edges[":".join(e)]) for e in hg.edge_types})
    np.savez(tmp_path / "h.npz", **arrays)
    hg = load_dataset(f"hfile:{tmp_path / 'h.npz'}")
    assert hg.x["author"].shape == (300, 0)
    part = _partition(f"hfile:{tmp_path / 'h.npz'}", 2, tmp_path / "p")
    r = _train(2, part, tmp_path / "log.jsonl", "--model", "rgcn", "--epochs", str(EPOCHS), "--hidden", "8",
               "--weight-decay", "0")
    assert "node types author, venue have no features" in r.stderr
    edge_types = [":".join(e) for e in hg.edge_types]
    torch.manual_seed(0)
    dims = [DIM if hg.x[t].shape[1] == 0 else hg.x[t].shape[1] for t in hg.node_types]
    ref = PyGTypedGNN(TypedGNN("rgcn", dims, 8, hg.num_classes, edge_types, num_bases=2), edge_types).double()
    tables = {t: torch.nn.Parameter(hash_normal(torch.arange(hg.num_nodes[t]) + hg.offsets[t], DIM).double())
              for t in ("author", "venue")}
    hg.x.update(tables)
    opt = torch.optim.Adam([*ref.parameters(), *tables.values()], lr=0.01, weight_decay=0.0)
    off, tm, losses = hg.offsets["paper"], torch.from_numpy(hg.train_mask), []
    for _ in range(EPOCHS):
        opt.zero_grad()
        loss = F.cross_entropy(ref(hg)[off: off + hg.num_nodes["paper"]][tm], torch.from_numpy(hg.y)[tm])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    np.testing.assert_allclose(_losses(tmp_path / "log.jsonl"), losses, rtol=1e-5, atol=1e-6)
