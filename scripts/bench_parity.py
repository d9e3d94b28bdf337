"""Accuracy parity: gnn-dist at 4 ranks against one PyG process, same hyper-parameters, 3 seeds.

python scripts/bench_parity.py [--ranks 4] [--seeds 0 1 2] [--only cora-pyg,...]

Rows:
- cora-pyg: `pyg:Planetoid:Cora` read from Planetoid's raw files (the shipped copy), GCN, 200 epochs;
- cora-npz: `file:datasets/gnn_benchmark/cora.npz?split=20` (Shchur's 20 per class, 30 per class val), GCN;
- typed-pyg: an academic typed graph (hsbm) written in PyG's IMDB raw layout and read by `pyg:IMDB`, R-GCN;
- chickenpox, england_covid: `json:` on the shipped PyG-Temporal files, EvolveGCN-O.

The PyG side builds the same initial weights (gd.nn.to_pyg of the same seeded model) and trains them
with torch's own dropout, so the two differ by their dropout masks and summation order only: the table
gives mean and standard deviation over the seeds, and the difference of the means.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnn_dist.data import load_dataset  # noqa: E402

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def gnn_dist_run(spec: str, data_dir: str | None, ranks: int, seed: int, work: Path, train: list[str]) -> dict:
    part = work / f"part-{abs(hash(spec)) % 10**6}"
    if not part.exists():
        extra = ["--data-dir", data_dir] if data_dir else []
        r = subprocess.run([sys.executable, "-m", "gnn_dist", "partition", "--dataset", spec, "--parts", str(ranks),
                            "--out", str(part), *extra], capture_output=True, text=True, cwd=ROOT)
        if r.returncode:
            sys.exit(r.stderr[-2000:])
    log = work / f"log-{seed}-{part.name}.jsonl"
    r = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "gnn_dist", "train", "--partition", str(part),
                        "--seed", str(seed), "--quiet", "--log", str(log), "--eval-every", "0", *train],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        sys.exit(r.stderr[-2000:])
    return json.loads(log.read_text().splitlines()[-1])


def pyg_static(g, seed: int, epochs: int, normalize: bool) -> float:
    from gnn_dist.nn import build_model, to_pyg

    torch.manual_seed(seed)
    model = to_pyg(build_model("gcn", g.num_features, 16, g.num_classes, layers=2, dropout=0.5))
    x = torch.from_numpy(np.array(g.x))
    if normalize:
        x = x / x.sum(dim=1, keepdim=True).clamp(min=1)
    ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()])
    y, tm, te = (torch.from_numpy(a) for a in (g.y, g.train_mask, g.test_mask))
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(x, ei)[tm], y[tm]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return float((model(x, ei).argmax(1)[te] == y[te]).float().mean())


def pyg_typed(hg, seed: int, epochs: int) -> float:
    from gnn_dist.nn.typed import PyGTypedGNN, TypedGNN

    edge_types = [":".join(e) for e in hg.edge_types]
    torch.manual_seed(seed)
    model = TypedGNN("rgcn", [hg.x[t].shape[1] for t in hg.node_types], 16, hg.num_classes, edge_types,
                     num_bases=2, dropout=0.5)
    ref = PyGTypedGNN(model, edge_types)
    off, n = hg.offsets[hg.target], hg.num_nodes[hg.target]
    y, tm, te = (torch.from_numpy(a) for a in (hg.y, hg.train_mask, hg.test_mask))
    opt = torch.optim.Adam(ref.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(epochs):
        ref.train()
        opt.zero_grad()
        F.cross_entropy(ref(hg)[off: off + n][tm], y[tm]).backward()
        opt.step()
    ref.eval()
    with torch.no_grad():
        return float((ref(hg)[off: off + n].argmax(1)[te] == y[te]).float().mean())


def pyg_dynamic(seq, seed: int, epochs: int, window: int) -> float:
    from gnn_dist.nn.dynamic import build_dynamic_model, to_pyg_dynamic
    from gnn_dist.train.dynamic_reference import ReferenceRun

    torch.manual_seed(seed)
    model = to_pyg_dynamic(build_dynamic_model("evolvegcn", seq.num_features, 16, 1, layers=2))
    ref = ReferenceRun(model, seq, window, lr=0.01)
    for _ in range(epochs):
        ref.train_epoch()
    return ref.evaluate()["test_mse"]


def imdb_layout(root: Path) -> None:
    """hsbm's typed graph in PyG's IMDB raw layout: features_i.npz, labels.npy, train_val_test_idx.npz, adjM.npz."""
    import scipy.sparse as sp

    hg = load_dataset("hsbm:papers=3000,authors=2000,venues=20,classes=4,seed=3")
    raw = root / "raw"
    raw.mkdir(parents=True)
    order = ["paper", "author", "venue"]  # IMDB's movie, director, actor slots
    for i, t in enumerate(order):
        sp.save_npz(raw / f"features_{i}.npz", sp.csr_matrix(hg.x[t]))
    np.save(raw / "labels.npy", hg.y)
    idx = [np.flatnonzero(m) for m in (hg.train_mask, hg.val_mask, hg.test_mask)]
    np.savez(raw / "train_val_test_idx.npz", train_idx=idx[0], val_idx=idx[1], test_idx=idx[2])
    off = np.cumsum([0] + [hg.num_nodes[t] for t in order])
    rows, cols = [], []
    for key, (s, d) in hg.edges.items():
        a, _, b = key.split(":")
        rows.append(np.asarray(s) + off[order.index(a)])
        cols.append(np.asarray(d) + off[order.index(b)])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    sp.save_npz(raw / "adjM.npz", sp.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(off[-1], off[-1])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--only", default="cora-pyg,cora-npz,typed-pyg,chickenpox,england_covid")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cora_root = work / "planetoid" / "Cora" / "raw"
        cora_root.mkdir(parents=True)
        for f in (ROOT / "datasets" / "cora").glob("ind.cora.*"):
            (cora_root / f.name).write_bytes(f.read_bytes())
        imdb_layout(work / "imdb")
        static = ["--epochs", "200", "--normalize-features"]
        cases = {
            "cora-pyg": ("pyg:Planetoid:Cora", str(work / "planetoid"), static, "test_acc",
                         lambda s: pyg_static(load_dataset("pyg:Planetoid:Cora", str(work / "planetoid")), s, 200, True)),
            "cora-npz": (f"file:{ROOT}/datasets/gnn_benchmark/cora.npz?split=20", None, static, "test_acc",
                         lambda s: pyg_static(load_dataset(f"file:{ROOT}/datasets/gnn_benchmark/cora.npz?split=20"),
                                              s, 200, True)),
            "typed-pyg": ("pyg:IMDB", str(work / "imdb"), ["--model", "rgcn", "--epochs", "50"], "test_acc",
                          lambda s: pyg_typed(load_dataset("pyg:IMDB", str(work / "imdb")), s, 50)),
            "chickenpox": (f"json:{ROOT}/datasets/temporal/chickenpox.json", None,
                           ["--model", "evolvegcn", "--layers", "2", "--hidden", "16", "--epochs", "5", "--window", "8"],
                           "test_mse", lambda s: pyg_dynamic(load_dataset(f"json:{ROOT}/datasets/temporal/chickenpox.json"),
                                                             s, 5, 8)),
            "england_covid": (f"json:{ROOT}/datasets/temporal/england_covid.json", None,
                              ["--model", "evolvegcn", "--layers", "2", "--hidden", "16", "--epochs", "20",
                               "--window", "8"], "test_mse",
                              lambda s: pyg_dynamic(load_dataset(f"json:{ROOT}/datasets/temporal/england_covid.json"),
                                                    s, 20, 8)),
        }
        for name in a.only.split(","):
            spec, data_dir, train, metric, reference = cases[name]
            ours = [gnn_dist_run(spec, data_dir, a.ranks, s, work, train)[metric] for s in a.seeds]
            theirs = [reference(s) for s in a.seeds]
            rows.append((name, metric, ours, theirs))
            print(f"{name}: gnn-dist {ours} PyG {theirs}", file=sys.stderr, flush=True)
    print(f"| data set | metric | gnn-dist, {a.ranks} ranks | PyG, 1 process | difference of means |\n|---|---|---|---|---|")
    for name, metric, ours, theirs in rows:
        print(f"| {name} | {metric} | {np.mean(ours):.4f} ± {np.std(ours):.4f} | {np.mean(theirs):.4f} ± "
              f"{np.std(theirs):.4f} | {np.mean(ours) - np.mean(theirs):+.4f} |")


if __name__ == "__main__":
    main()
