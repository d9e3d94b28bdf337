"""Epoch time and memory of gnn-dist against PyG single-process, side by side in one run.

    python scripts/bench_train.py [--dataset SPEC] [--epochs N] [--hidden H]

Prints one table: PyG (one process, all cores) on its fastest CPU path, a
`torch.sparse` CSR `adj_t` (GCN's normalised once, outside the timed epochs),
with the `edge_index` path beside it for reference; gnn-dist at P=1, 2, 4 (the
launcher gives each rank cores / ranks threads); ratios against PyG's fastest
path and against P=1, and each configuration's peak RSS per rank. Each
gnn-dist configuration runs with torch's huge pages where `gnn-dist train`
would turn them on for its partition (THP_MEM_ALLOC_ENABLE, see
gnn_dist/runtime/malloc.py), and PyG's rows as the smallest P does; a value in
the environment applies to every row. A second table gives each configuration's
time to accuracy (gnn_dist.train.tta: evaluated every --eval-every epochs, timed
apart; the target is PyG adj_t's final test accuracy minus 0.3 points, or
--target; --png plots it): give --epochs enough to get there (e.g. 100).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gnn_dist.cli.plots import plot_tta  # noqa: E402
from gnn_dist.train import tta  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def evaluate_into(record: dict, evaluate, epoch: int, epochs: int, every: int) -> None:
    """Scores of this epoch's model into `record`, timed apart (`eval_time`), every `every` epochs and at the end."""
    if epoch == epochs or (every and epoch % every == 0):
        t = time.perf_counter()
        record.update(evaluate())
        record["eval_time"] = time.perf_counter() - t


def worker(part_dir: str, epochs: int, hidden: int, model: str, device: str = "cpu", transport: str = "auto",
           eval_every: int = 1) -> None:
    """One rank: train 1 + `epochs` epochs, each evaluated (timed apart) every `eval_every`; report the mean
    epoch time after the warm-up one, the per-epoch records and peak RSS."""
    import torch
    import torch.distributed as dist

    from gnn_dist.graph.load import load_partition
    from gnn_dist.nn import build_model, registry
    from gnn_dist.runtime import staging
    from gnn_dist.runtime.launch import init
    from gnn_dist.train.node import Trainer
    from partition.store import read_meta

    ctx = init(backend=None if device == "cuda" else "gloo", expected_world=read_meta(part_dir)["num_parts"],
               transport=transport)
    graph = load_partition(part_dir, ctx, verify=False)
    torch.manual_seed(0)
    if registry.is_user_model(model):  # a model file (--compare): e.g. PyG's own GCN, wrapped
        net = registry.build(model, graph.num_features, graph.num_classes, registry.ModelConfig(hidden=hidden))
    else:
        net = build_model(model, graph.num_features, hidden, graph.num_classes, layers=2, dropout=0.5)
    trainer = Trainer(net, graph, ctx, progress=False, eval_every=0)
    sync = torch.cuda.synchronize if ctx.device.type == "cuda" else (lambda: None)
    records = []
    for e in range(epochs + 1):  # epoch 0 warms up: in time to accuracy, not in the mean epoch time
        if ctx.world_size > 1:
            dist.barrier()
        t = time.perf_counter()
        trainer.train_epoch(e)
        sync()
        records.append({"epoch": e, "epoch_time": time.perf_counter() - t})
        evaluate_into(records[-1], trainer.evaluate, e, epochs, eval_every)
    times = torch.tensor([r["epoch_time"] for r in records])
    if ctx.world_size > 1:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)  # an epoch ends when its slowest rank does
    for r, dt in zip(records, times.tolist()):
        r["epoch_time"] = dt
    dt = sum(times.tolist()[1:]) / epochs
    rss = [None] * ctx.world_size
    if ctx.world_size > 1:
        dist.all_gather_object(rss, peak_rss_mb())
    else:
        rss = [peak_rss_mb()]
    if ctx.is_main:
        placement = f"{ctx.device}, {ctx.backend}" + (" staged through host memory" if staging.active() else "")
        print("RESULT " + json.dumps({"epoch_s": dt, "rss_mb": rss, "threads": torch.get_num_threads(),
                                     "placement": placement, "records": records}))
    ctx.close()


def sparse_adj_t(g, model: str, net):
    """PyG's fastest CPU input: the transposed adjacency as a torch.sparse CSR matrix, GCN-normalised once."""
    import torch

    src, dst = (torch.from_numpy(a) for a in g.edge_index())
    adj_t = torch.sparse_coo_tensor(torch.stack([dst, src]), torch.ones(src.shape[0]), (g.num_nodes,) * 2).coalesce()
    if model == "gcn":
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        adj_t = gcn_norm(adj_t, add_self_loops=True)[0]
        for conv in net.convs:
            conv.normalize = False  # the normalised matrix is the input: no per-call normalisation
    return adj_t.to_sparse_csr()


def pyg_child(spec: str, epochs: int, hidden: int, model: str, path: str, device: str = "cpu",
              eval_every: int = 1) -> None:
    """PyG single process on the whole graph, same model and optimizer; run in its own process for a clean RSS.

    `path` "adj_t": a normalised torch.sparse CSR adjacency (PyG's fastest CPU path); "edge_index": the
    message-passing path with GCN's normalisation cached."""
    import torch
    import torch.nn.functional as F

    from gnn_dist.data import load_dataset
    from gnn_dist.nn import build_model, to_pyg
    from gnn_dist.runtime.malloc import keep_freed_memory

    keep_freed_memory()  # the allocator setting gnn-dist's ranks get at init: compare the training code, not malloc
    g = load_dataset(spec)
    torch.manual_seed(0)
    net = to_pyg(build_model(model, g.num_features, hidden, g.num_classes, layers=2, dropout=0.5))
    if path == "adj_t":
        ei = sparse_adj_t(g, model, net)
    else:
        for conv in net.convs:
            conv.cached = model == "gcn"  # normalisation computed once
        ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()])
    net, ei = net.to(device), ei.to(device)
    x = torch.from_numpy(g.x).to(device)
    y, tm = torch.from_numpy(g.y).to(device), torch.from_numpy(g.train_mask).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    vm, sm = torch.from_numpy(g.val_mask).to(device), torch.from_numpy(g.test_mask).to(device)

    def step():
        net.train()
        opt.zero_grad()
        F.cross_entropy(net(x, ei)[tm], y[tm]).backward()
        opt.step()

    @torch.no_grad()
    def evaluate() -> dict:
        net.eval()
        pred = net(x, ei).argmax(dim=1)
        return {f"{k}_acc": float((pred[m] == y[m]).float().mean()) for k, m in (("val", vm), ("test", sm))}

    records = []
    for e in range(epochs + 1):  # epoch 0 warms up, as gnn-dist's
        sync()
        t = time.perf_counter()
        step()
        sync()
        records.append({"epoch": e, "epoch_time": time.perf_counter() - t})
        evaluate_into(records[-1], evaluate, e, epochs, eval_every)
    print("RESULT " + json.dumps({"epoch_s": sum(r["epoch_time"] for r in records[1:]) / epochs,
                                 "rss_mb": [peak_rss_mb()], "threads": torch.get_num_threads(), "records": records}))


def huge_pages(part_dir: Path, hidden: int) -> dict:
    """The huge-page setting `gnn-dist train` would run this partition under, as an environment."""
    from gnn_dist.runtime.malloc import activation_bytes
    from gnn_dist.runtime.tuning import HUGE_PAGES_MIN_BYTES
    from partition.store import read_meta

    on = activation_bytes(read_meta(part_dir), hidden) >= HUGE_PAGES_MIN_BYTES
    return {"THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE", "1" if on else "0")}


def _result(cmd: list[str], env: dict | None = None) -> dict:
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"benchmark step failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="sbm:nodes=100000,avg_degree=20,features=128")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--compare", default=None, metavar="FILE.py:build[,...]",
                    help="also run these model files at each P, beside --model (e.g. examples/pyg_models.py:gcn, "
                         "PyG's own GCN wrapped, and examples/pyg_models.py:gcn_gd, the same model of gd.nn.GCNConv)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--transports", default="auto",
                    help="comma-separated CPU halo transports to run P > 1 with, side by side (auto: small plans over MPI)")
    tta.add_flags(ap, "PyG adj_t")
    ap.add_argument("--png", default=None, help="also plot time to accuracy here")
    ap.add_argument("--transport", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pyg", default=None, choices=["adj_t", "edge_index"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.epochs, a.hidden, a.model, a.device, a.transport, a.eval_every)
    if a.pyg:
        return pyg_child(a.dataset, a.epochs, a.hidden, a.model, a.pyg, a.device, a.eval_every)

    from gnn_dist.cli import main as cli

    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--epochs", str(a.epochs), "--hidden", str(a.hidden), "--model", a.model, "--device", a.device,
              "--eval-every", str(a.eval_every)]
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    ranks = [int(x) for x in a.ranks.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for p in ranks:
            if cli(["partition", "--dataset", a.dataset, "--parts", str(p), "--out", str(Path(tmp) / f"p{p}")]) != 0:
                raise SystemExit("partitioning failed")
        pyg_env = huge_pages(Path(tmp) / f"p{min(ranks)}", a.hidden)
        rows = {f"PyG {kind}": _result(me + ["--pyg", kind, "--dataset", a.dataset] + common, pyg_env)
                for kind in ("adj_t", "edge_index")}
        for p in ranks:
            d = Path(tmp) / f"p{p}"
            for t in a.transports.split(",") if p > 1 else ["auto"]:
                name = f"gnn-dist P={p}" + (f" {t}" if p > 1 and "," in a.transports else "")
                rows[name] = _result([mpiexec, "-n", str(p)] + me + ["--worker", str(d), "--transport", t] + common,
                                     huge_pages(d, a.hidden))
            for spec in a.compare.split(",") if a.compare else []:
                other = [x if x != a.model else spec for x in common]
                rows[f"P={p} {Path(spec).name}"] = _result(
                    [mpiexec, "-n", str(p)] + me + ["--worker", str(d)] + other, huge_pages(d, a.hidden))
    base, p1 = rows["PyG adj_t"]["epoch_s"], rows.get("gnn-dist P=1", {}).get("epoch_s")
    print(f"\n{a.dataset}, {a.model}, 2 layers, hidden {a.hidden}, {a.epochs} timed epochs, {os.cpu_count()} cores")
    print(f"{'configuration':<18} {'threads/rank':>12} {'epoch s':>9} {'vs PyG':>7} {'vs P=1':>7} {'peak RSS/rank MB':>18}")
    for name, r in rows.items():
        vs_p1 = f"{r['epoch_s'] / p1:.2f}" if p1 and name.startswith("gnn") else "-"
        rss = "/".join(f"{m:.0f}" for m in r["rss_mb"])
        print(f"{name:<18} {r['threads']:>12} {r['epoch_s']:>9.3f} {r['epoch_s'] / base:>7.2f} {vs_p1:>7} {rss:>18}")
    time_to_accuracy(a, {name: r["records"] for name, r in rows.items()})


def time_to_accuracy(a: argparse.Namespace, runs: dict) -> None:
    """Every configuration's time to the target (gnn_dist.train.tta), the warm-up epoch included."""

    target = a.target if a.target is not None else tta.default_target(runs["PyG adj_t"])
    print(f"\n{tta.table(runs, target)}")
    if a.png:
        print(f"plot: {plot_tta(runs, target, a.png, f'time to accuracy, {a.dataset.split(chr(44))[0]}')}")


if __name__ == "__main__":
    main()
