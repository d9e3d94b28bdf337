"""Cheap exchange, measured in the network lab: one table and one plot from one run (needs root).

    python scripts/bench_exchange.py [--dataset SPEC] [--parts 4] [--rate 1gbit] [--epochs 30] [--layers 2] [--png F]
                                     [--partition-method mtkahypar [--partition-objective vol]]

Brings up the lab (scripts/netlab.py), partitions the data set, and trains the
same model under each exchange setting, one rank per namespace: vanilla exact
without and with overlap (every layer's halo sent every epoch), exact with the
input cache (the input features' halo fetched once), adaptive without it,
then with it: int8, int4, adaptive, staleness=1 (forward rows stale, gradients waited for: the
default) alone and with adaptive, the same with stale gradients too (PipeGCN-GF, `--stale-grads same`,
the default before), skipping (--skip-threshold 1),
`--exchange auto`, and a compute-only run (halo rows replaced by zeros, nothing sent) as the floor.
Prints epoch time and halo bytes per epoch with ratios against exact
no-overlap and against max(compute-only, busiest rank's bytes / link rate),
then plots final test accuracy against epoch time. Each setting is evaluated every --eval-every
epochs, timed apart, and a second table and plot give its time to accuracy (gnn_dist.train.tta): the
training time and epochs until the validation-picked model's test accuracy reaches exact's final one
minus 0.3 points (or --target), or "not reached".

With --partition-method M the same settings run on two partitions of the data set, METIS k-way and M
(with --partition-objective, default vol: the halo rows themselves), one table each, then one line per
setting with M's epoch time over METIS's and each partition's busiest-rank bytes.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from gnn_dist.cli.exchange_flags import add_exchange_flags, auto_exchange, exchange_config  # noqa: E402
from gnn_dist.cli.plots import plot_tta  # noqa: E402
from gnn_dist.train import tta  # noqa: E402
from partition.errors import MissingExtraError  # noqa: E402

# The baseline is vanilla: every layer's halo sent every epoch. gnn-dist's own settings fetch the static
# input features' halo once (exact); "adaptive-no-cache" shows what compression alone buys.
SETTINGS = {
    "exact-no-overlap": ["--codec", "fp32", "--no-overlap", "--no-input-cache"],
    "exact-overlap": ["--codec", "fp32", "--no-input-cache"],
    "exact+input-cache": ["--codec", "fp32"],
    "adaptive-no-cache": ["--codec", "adaptive", "--no-input-cache"],
    "int8": ["--codec", "int8"],
    "int4": ["--codec", "int4"],
    "adaptive": ["--codec", "adaptive"],
    "stale1": ["--staleness", "1"],
    "adaptive+stale1": ["--codec", "adaptive", "--staleness", "1"],
    "stale1-stale-grads": ["--staleness", "1", "--stale-grads", "same"],
    "adaptive+stale1-stale-grads": ["--codec", "adaptive", "--staleness", "1", "--stale-grads", "same"],
    "skip": ["--skip-threshold", "1"],
    "adaptive+skip": ["--codec", "adaptive", "--skip-threshold", "1"],
    "auto": ["--exchange", "auto"],
    "compute-only": ["--compute-only"],
}


class NoExchange:
    """Stands in for HaloExchange: zeros arrive at once, nothing is sent (the compute floor)."""

    def __init__(self, ex):
        self.ex = ex
        from gnn_dist.runtime.transfers import Ready

        self.Ready = Ready

    @property
    def config(self):
        return self.ex.config

    def static_halo(self, x):
        return x.new_zeros((self.ex.num_halo,) + tuple(x.shape[1:]))

    def provide(self, x, halo):  # zeros for the input's halo, but dropped as a fetched one is (same compute)
        if callable(halo):
            halo(self)

    def forget(self, x):
        pass

    def held(self, x):
        return None

    def channel(self, owner, training):
        return None

    def start(self, x, channel=None):
        return self.Ready(x.new_zeros((self.ex.num_halo,) + tuple(x.shape[1:])))

    def start_backward(self, g, channel=None):
        return self.Ready(g.new_zeros((int(self.ex.send_idx.shape[0]),) + tuple(g.shape[1:])))

    def scatter_back(self, grad, received):
        return grad

    def epoch_metrics(self):
        return {}

    def loop_ends_steps(self):  # no policy counts steps here
        pass

    def end_step(self):
        pass


def worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from gnn_dist.graph.load import load_partition
    from gnn_dist.nn import build_model
    from gnn_dist.runtime.launch import init
    from gnn_dist.train.node import Trainer
    from partition.store import read_meta

    ctx = init(expected_world=read_meta(a.worker)["num_parts"], timeout_s=600)
    graph = load_partition(a.worker, ctx, overlap=not a.no_overlap, verify=False, exchange=exchange_config(a))
    if a.compute_only:
        graph.exchange = NoExchange(graph.exchange)
    torch.manual_seed(0)
    model = build_model(a.model, graph.num_features, a.hidden, graph.num_classes, layers=a.layers, dropout=0.5)
    if a.exchange == "auto":
        auto_exchange(a, ctx, graph, graph.num_classes)
    tr = Trainer(model, graph, ctx, progress=False, eval_every=0, lr=0.01)
    times, sent, waited, cpu, records = [], [], [], [], []
    for e in range(a.epochs):
        dist.barrier()
        t = time.perf_counter()
        c = time.process_time()
        tr.train_epoch(e)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        m = graph.exchange.epoch_metrics()
        sent.append(sum(sum(v["bytes"]) for k, v in m.items() if not k.endswith("eval")))
        waited.append(sum(v["wait_s"] for k, v in m.items() if not k.endswith("eval")))
        records.append({"epoch": e})
        if e + 1 == a.epochs or (a.eval_every and (e + 1) % a.eval_every == 0):  # timed apart from training
            t = time.perf_counter()
            records[-1].update(tr.evaluate())
            records[-1]["eval_time"] = time.perf_counter() - t
    graph.exchange.drain() if hasattr(graph.exchange, "drain") else None
    acc = records[-1]["test_acc"]
    slowest = torch.tensor(times)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # an epoch ends when its slowest rank does
    for r, dt in zip(records, slowest.tolist()):
        r["epoch_time"] = dt
    warm = 2
    per_rank = [None] * ctx.world_size
    dist.all_gather_object(per_rank, sum(sent[warm:]) / (a.epochs - warm))
    wait = torch.tensor([sum(waited[warm:]) / (a.epochs - warm)])
    dist.all_reduce(wait, op=dist.ReduceOp.MAX)
    cpu_s = torch.tensor([sum(cpu[warm:]) / (a.epochs - warm)])
    dist.all_reduce(cpu_s)  # all ranks' CPU seconds per epoch: against 2 cores x epoch time, how busy the box was
    t_epoch = torch.tensor([sum(times[warm:]) / (a.epochs - warm)])
    dist.all_reduce(t_epoch, op=dist.ReduceOp.MAX)
    if ctx.is_main:
        Path(a.result).write_text(json.dumps({"epoch_s": float(t_epoch), "bytes_per_rank": per_rank,
                                              "wait_s": float(wait), "cpu_s": float(cpu_s), "test_acc": acc,
                                              "records": records}))
    ctx.close()


def parser() -> argparse.ArgumentParser:
    """The benchmark's flags, and (hidden) a worker's: its setting's `gnn-dist train` exchange flags."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="sbm:nodes=50000,avg_degree=20,homophily=0.5,features=128,classes=8")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--layers", type=int, default=2, help="GNN layers (AdaQP and PipeGCN report 3-4)")
    ap.add_argument("--png", default="bench_exchange.png")
    tta.add_flags(ap, "the exact run")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(SETTINGS)}")
    ap.add_argument("--partition-method", default=None, metavar="M",
                    help="also run on a partition by method M (e.g. mtkahypar, kahip) and compare with METIS")
    ap.add_argument("--partition-objective", default="vol", choices=["cut", "vol"],
                    help="objective of --partition-method where it takes one (default vol)")
    for flag in ("--worker", "--result"):
        ap.add_argument(flag, default=None, help=argparse.SUPPRESS)
    known = len(ap._actions)
    add_exchange_flags(ap)  # a worker's setting: SETTINGS' flags, as `gnn-dist train` takes them
    for action in ap._actions[known:]:
        action.help = argparse.SUPPRESS
    ap.add_argument("--no-overlap", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-input-cache", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compute-only", action="store_true", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    a = parser().parse_args()
    if a.worker:
        return worker(a)

    import netlab

    from gnn_dist.cli import main as cli

    rate_bps = netlab.rate_bytes_per_s(a.rate)
    settings = {k: v for k, v in SETTINGS.items() if not a.only or k in a.only.split(",")}
    methods = {"metis": []}
    if a.partition_method:
        methods[a.partition_method] = ["--method", a.partition_method] + (
            ["--objective", a.partition_objective] if a.partition_method in ("metis", "mtkahypar") else [])
    results: dict = {m: {} for m in methods}
    with tempfile.TemporaryDirectory() as tmp:
        parts = {}
        for m, flags in methods.items():
            parts[m] = Path(tmp) / f"part-{m}"
            if cli(["partition", "--dataset", a.dataset, "--parts", str(a.parts), "--out", str(parts[m]), *flags]) != 0:
                raise SystemExit(f"partitioning with {m} failed")
        netlab.down()
        netlab.up(a.parts, a.rate, None)
        try:
            for i, (m, (name, flags)) in enumerate((m, s) for m in methods for s in settings.items()):
                results[m][name] = run_setting(a, parts[m], Path(tmp) / f"r{i}.json", flags, 29500 + i, f"{name} @ {m}")
        finally:
            netlab.down()
    for m, res in results.items():
        report(a, res, rate_bps, m)
        time_to_accuracy(a, res, m)
    if len(results) > 1:
        compare(results, a.partition_method)


def run_setting(a, part: Path, res: Path, flags: list[str], port: int, label: str) -> dict:
    """One setting in the lab, one rank per namespace; its result record."""
    import netlab

    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(part), "--result", str(res),
           "--epochs", str(a.epochs), "--hidden", str(a.hidden), "--model", a.model, "--layers", str(a.layers),
           "--eval-every", str(a.eval_every), *flags]
    t = time.perf_counter()
    code = netlab.run(cmd, port=port, timeout=1800)
    if code != 0 or not res.exists():
        raise SystemExit(f"setting '{label}' failed (exit {code})")
    r = json.loads(res.read_text())
    print(f"[bench] {label}: {r['epoch_s']:.3f} s/epoch, acc {r['test_acc']:.4f} ({time.perf_counter() - t:.0f}s)",
          file=sys.stderr)
    return r


def compare(results: dict, method: str) -> None:
    """Per setting: the other partition's epoch time over METIS's, and each one's busiest-rank bytes."""
    print(f"\n{'setting':<24} {'METIS s':>8} {method + ' s':>14} {'x METIS':>8} {'METIS max MB':>13} "
          f"{method + ' max MB':>16} {'acc METIS':>9} {'acc ' + method:>14}")
    for name, r in results["metis"].items():
        o = results[method][name]
        print(f"{name:<24} {r['epoch_s']:>8.3f} {o['epoch_s']:>14.3f} {o['epoch_s'] / r['epoch_s']:>8.2f} "
              f"{max(r['bytes_per_rank']) / 1e6:>13.2f} {max(o['bytes_per_rank']) / 1e6:>16.2f} "
              f"{r['test_acc']:>9.4f} {o['test_acc']:>14.4f}")


def time_to_accuracy(a, results: dict, method: str) -> None:
    """Per setting: training time and epochs until the validation-picked model meets the target
    (gnn_dist.train.tta), and a plot of that race beside the epoch-time one."""

    runs = {name: r["records"] for name, r in results.items()}
    exact = next((name for name in ("exact+input-cache", "exact-overlap", "exact-no-overlap") if name in runs), None)
    if a.target is None and exact is None:
        print("(time to accuracy: run an exact setting, or give --target)")
        return
    target = a.target if a.target is not None else tta.default_target(runs[exact])
    print(f"\n{tta.table(runs, target)}")
    png = Path(a.png)
    png = png.with_name(f"{png.stem}{'' if method == 'metis' else '-' + method}-tta.png")
    try:
        print(f"plot: {plot_tta(runs, target, str(png), f'time to accuracy, {a.parts} ranks at {a.rate} ({method})')}")
    except MissingExtraError as e:
        print(f"({e})")


def report(a, results: dict, rate_bps: float, method: str = "metis") -> None:
    base = results.get("exact-no-overlap", {}).get("epoch_s")
    floor_c = results.get("compute-only", {}).get("epoch_s", 0.0)
    print(f"\n{a.dataset} ({method} partition), {a.parts} ranks in the lab at {a.rate} per link, {a.layers}-layer "
          f"{a.model} hidden {a.hidden}, {a.epochs} epochs (mean of epochs 3..{a.epochs})")
    print(f"{'setting':<24} {'epoch s':>8} {'x exact':>8} {'MB/epoch/rank':>14} {'x bytes':>8} "
          f"{'bound s':>8} {'x bound':>8} {'wait ms':>8} {'cpu s':>6} {'test acc':>8}")
    base_b = max(results.get("exact-no-overlap", {}).get("bytes_per_rank", [0]))
    for name, r in results.items():
        b = max(r["bytes_per_rank"])
        bound = max(floor_c, b / rate_bps)
        ratio = f"{r['epoch_s'] / base:.2f}" if base else "-"
        x_bytes = f"{b / base_b:.3f}" if base_b else "-"
        print(f"{name:<24} {r['epoch_s']:>8.3f} {ratio:>8} {b / 1e6:>14.2f} {x_bytes:>8} "
              f"{bound:>8.3f} {r['epoch_s'] / bound if bound else float('nan'):>8.2f} {1e3 * r.get('wait_s', 0):>8.1f} "
              f"{r.get('cpu_s', 0):>6.3f} {r['test_acc']:>8.4f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: pip install 'gnn-dist[plot]' for the plot)")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^vP*Xph"
    for i, (name, r) in enumerate(results.items()):  # a legend, not labels: settings cluster at equal times
        ax.scatter(r["epoch_s"], r["test_acc"], s=45, marker=markers[i % len(markers)], label=name, alpha=0.85)
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel(f"epoch time, s ({a.parts} ranks, {a.rate} links)")
    ax.set_ylabel(f"test accuracy after {a.epochs} epochs")
    ax.set_title(f"gnn-dist exchange settings on {a.dataset.split(',')[0]} ({method} partition)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = a.png if method == "metis" else str(Path(a.png).with_name(f"{Path(a.png).stem}-{method}.png"))
    fig.savefig(png, dpi=120)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
