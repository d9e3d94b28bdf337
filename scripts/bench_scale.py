"""Big graphs: PyG against gnn-dist at P = 1, 2 and 4, with memory, partitioning cost and a roofline, from one run.

    python scripts/bench_scale.py [--dataset SPEC] [--epochs 3] [--hidden 128] [--ranks 1,2,4] [--device cpu|cuda]

Default graph: sbm:nodes=1000000,avg_degree=16,homophily=0.9,features=128,classes=16 (16M edges), GCN with
2 layers. Prints three tables:

1. Rows: PyG with `edge_index` (skipped, with a note, where its per-edge messages would not fit in the
   memory available), PyG with a GCN-normalised `torch.sparse` CSR `adj_t` (its fastest CPU path), and
   gnn-dist at each P (`scripts/bench_train.py` runs them). Columns: epoch seconds, peak RSS per rank,
   and for gnn-dist `gnn-dist partition`'s time, peak RSS and the peak it estimated beforehand.
2. Machine peaks measured here: memory bandwidth (a large copy) and dense flops (a large matmul).
3. gnn-dist's P=1 epoch by kind of work beside a roofline for each kind (the bytes it must move over the
   measured bandwidth, or its flops over the measured peak), and the timed epoch (no profiler) beside. On
   the CPU: torch profiler, own CPU time per operator. On CUDA: device time, each operator's own kernels
   as the GPU recorded them (not stretched by the profiler's host overhead), with the device's busy sum
   and the timed epoch's idle rest.
   The byte counts are lower bounds: a sparse product reads each edge's source row once (width x 4 B,
   plus 12 B of index and value) and writes its output once; an elementwise pass reads and writes its
   tensor once.

Every process runs with torch's default threads (all cores for one process; the launcher gives each of
P ranks cores / P), and with torch's huge pages where `gnn-dist train` would turn them on for the
partition (THP_MEM_ALLOC_ENABLE; PyG's rows as P=1, since any torch user can set it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_train import _result, huge_pages, peak_rss_mb, pyg_child, worker  # noqa: E402

DEFAULT = "sbm:nodes=1000000,avg_degree=16,homophily=0.9,features=128,classes=16"
KINDS = ("sparse products", "dense products", "elementwise and dropout", "exchange", "optimizer", "other")


# ------------------------------------------------------------------ machine peaks
def machine_peaks(device: str) -> dict:
    """Best of 5: bytes per second of a 512 MB copy (read + write), flops per second of a 4096^2 fp32 matmul."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def best(fn, reps: int = 5) -> float:
        fn()
        sync()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t)
        return min(times)

    def copy_rate() -> float:  # its 1 GB of tensors are freed on return
        a = torch.rand(1 << 27, device=device)
        b = torch.empty_like(a)
        return 2 * a.numel() * 4 / best(lambda: b.copy_(a))

    bw = copy_rate()
    m = 4096
    x, y = torch.rand(m, m, device=device), torch.rand(m, m, device=device)
    return {"bandwidth": bw, "flops": 2 * m**3 / best(lambda: x @ y)}


# ---------------------------------------------------------------------- roofline
def roofline(n: int, nnz: int, dims: list[int], params: int, peaks: dict) -> dict:
    """Seconds per epoch each kind of work needs at the machine's peaks, for gnn-dist's GCN (docstring above)."""
    bw, fl = peaks["bandwidth"], peaks["flops"]
    sparse_bytes = dense_flops = elem_bytes = 0.0
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
        x_grad = i > 0  # the input features need no gradient
        first = d_in * (1 + x_grad) <= 2 * d_out  # gnn_dist.nn.conv.aggregate_first, training
        width = d_in if first else d_out
        spmm = nnz * (4 * width + 12) + n * 4 * width
        sparse_bytes += spmm * (1 + (x_grad or not first))  # backward product only where a gradient flows
        dense_flops += 2 * n * d_in * d_out * (2 + x_grad)  # forward, weight gradient, input gradient
        elem_bytes += 8 * n * d_in * (2 if i == 0 else 4)  # dropout (in, and out for hidden); relu in, out
        elem_bytes += 8 * n * d_out * 2  # bias add, and its gradient
    return {"sparse products": sparse_bytes / bw, "dense products": dense_flops / fl,
            "elementwise and dropout": elem_bytes / bw, "exchange": 0.0, "optimizer": 16 * 7 * params / bw}


SPMM_SCOPE = "gnn_dist.spmm"  # the profile child wraps every sparse product in this record


def kind_of(event) -> str:
    """The kind of work a profiled operator does: by the scope it runs in (a sparse product's aten::mm is
    told from a dense one by its caller), else by its own name."""
    scope = event
    while scope is not None:
        if scope.name == SPMM_SCOPE:
            return "sparse products"
        if scope.name.startswith("Optimizer."):
            return "optimizer"
        scope = scope.cpu_parent
    op = event.name
    if any(k in op for k in ("all_to_all", "alltoall", "all_reduce", "allreduce", "gloo", "nccl", "record_param_comms")):
        return "exchange"
    if re.search(r"aten::(mm|addmm|bmm|matmul|linear)$", op):
        return "dense products"
    if op.startswith("aten::") or "Dropout" in op:
        return "elementwise and dropout"
    return "other"


def scoped_spmm():
    """Wrap the sparse products the layers call in a profiler record (this process only)."""
    import torch

    from gnn_dist.graph import local
    from gnn_dist.nn import message_passing

    plain = local.spmm

    def spmm(a, x, *args, **kwargs):
        with torch.profiler.record_function(SPMM_SCOPE):
            return plain(a, x, *args, **kwargs)

    message_passing.spmm = spmm


def profile_child(part_dir: str, epochs: int, hidden: int, model: str, device: str) -> None:
    """gnn-dist at P=1: time per kind of work over `epochs` profiled epochs, per epoch, beside `epochs` timed
    ones without the profiler. CPU: each operator's own CPU time (the wall's rest, Python between
    operators, is other). CUDA: each operator's own kernels' device time, from the GPU's activity records,
    which the profiler's host overhead does not stretch (its wall does: 35x the timed epoch on an H200)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gnn_dist.graph.load import load_partition
    from gnn_dist.nn import build_model
    from gnn_dist.runtime.launch import init
    from gnn_dist.train.node import Trainer

    scoped_spmm()
    ctx = init(backend=None if device == "cuda" else "gloo", expected_world=1)
    graph = load_partition(part_dir, ctx, verify=False)
    torch.manual_seed(0)
    net = build_model(model, graph.num_features, hidden, graph.num_classes, layers=2, dropout=0.5)
    trainer = Trainer(net, graph, ctx, progress=False, eval_every=0)
    trainer.train_epoch(0)  # warm-up: kernels compile, caches fill
    cuda = ctx.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def run_epochs() -> float:
        sync()
        t = time.perf_counter()
        for e in range(1, epochs + 1):
            trainer.train_epoch(e)
        sync()
        return (time.perf_counter() - t) / epochs

    timed = run_epochs()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        wall = run_epochs()
    kinds = device_kinds(prof.events()) if cuda else cpu_kinds(prof.events(), wall * epochs)
    params = sum(p.numel() for p in net.parameters())
    print("RESULT " + json.dumps({"wall": wall, "timed": timed, "device": cuda,
                                  "kinds": {k: v / epochs for k, v in kinds.items()}, "n": graph.num_inner,
                                  "nnz": graph.num_edges, "dims": [graph.num_features, hidden, graph.num_classes],
                                  "params": params}))
    ctx.close()


def cpu_kinds(events, wall: float) -> dict:
    """Seconds of each operator's own CPU time by kind; the rest of `wall` (Python between operators) is other."""
    kinds = dict.fromkeys(KINDS, 0.0)
    for ev in events:
        kinds[kind_of(ev)] += ev.self_cpu_time_total / 1e6
    kinds["other"] += max(0.0, wall - sum(kinds.values()))
    return kinds


def device_kinds(events) -> dict:
    """Seconds of device time by kind: each host operator's own kernels (self device time), by the operator's
    kind; a kernel no operator launched (e.g. a Triton kernel started from Python) by its own name.

    The kernels appear twice in the profiler's events, as device events and in their operator's kernel
    list: operators are classified with theirs, and device events only where no operator listed them."""
    from collections import Counter

    from torch.autograd import DeviceType

    kinds = dict.fromkeys(KINDS, 0.0)
    claimed = Counter()
    for ev in events:
        if ev.device_type == DeviceType.CPU:
            kinds[kind_of(ev)] += ev.self_device_time_total / 1e6
            claimed.update(k.name for k in ev.kernels)
    for ev in events:
        if ev.device_type != DeviceType.CPU:
            if claimed[ev.name] > 0:
                claimed[ev.name] -= 1
            else:
                kinds[kernel_kind(ev.name)] += ev.self_device_time_total / 1e6
    return kinds


def kernel_kind(name: str) -> str:
    """The kind of work of a kernel no operator launched, by its name."""
    low = name.lower()
    if "dropout" in low:
        return "elementwise and dropout"
    if any(k in low for k in ("encode", "decode", "codec", "nccl", "memcpy")):
        return "exchange"
    return "other"


# -------------------------------------------------------------------- partition
def partition_child(spec: str, parts: int, out: str) -> None:
    """`gnn-dist partition` in this process, then its wall time and peak RSS (the estimate is on stderr)."""
    from gnn_dist.cli import main as cli

    t = time.perf_counter()
    if cli(["partition", "--dataset", spec, "--parts", str(parts), "--out", out]) != 0:
        raise SystemExit("partitioning failed")
    print("RESULT " + json.dumps({"seconds": time.perf_counter() - t, "rss_mb": peak_rss_mb()}))


def run_partition(me: list[str], spec: str, parts: int, out: Path) -> dict:
    r = subprocess.run(me + ["--partition-child", str(parts), "--out", str(out), "--dataset", spec],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    result = next((json.loads(x[7:]) for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if result is None:
        raise SystemExit(f"partitioning failed:\n{r.stderr[-3000:]}")
    est = re.search(r"estimated peak memory ([\d.]+) GiB", r.stderr)
    result["estimate_mb"] = float(est.group(1)) * 1024 if est else float("nan")
    return result


def edge_index_fits(spec: str, hidden: int) -> tuple[bool, str]:
    """PyG's edge_index path holds a few edges x hidden float tensors (messages, their gradients): about 3 of
    them at once measured on the 1M-node graph (20.7 GB peak for 16M edges at width 128)."""
    import psutil

    from gnn_dist.data import load_dataset

    g = load_dataset(spec)
    need = 3 * g.num_edges * hidden * 4 + g.num_nodes * g.num_features * 4
    avail = psutil.virtual_memory().available
    return need < 0.8 * avail, f"needs about {need / 2**30:.1f} GiB, {avail / 2**30:.1f} GiB available"


# ------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=DEFAULT)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: PyG adj_t and gnn-dist on the GPU (ranks share it where they outnumber GPUs), "
                         "roofline against its peaks")
    ap.add_argument("--skip-edge-index", action="store_true", help="leave out PyG's edge_index row")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pyg", default=None, choices=["adj_t", "edge_index"], help=argparse.SUPPRESS)
    ap.add_argument("--partition-child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.epochs, a.hidden, a.model, a.device)
    if a.profile:
        return profile_child(a.profile, a.epochs, a.hidden, a.model, a.device)
    if a.pyg:
        return pyg_child(a.dataset, a.epochs, a.hidden, a.model, a.pyg, a.device)
    if a.partition_child:
        return partition_child(a.dataset, a.partition_child, a.out)

    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--epochs", str(a.epochs), "--hidden", str(a.hidden), "--model", a.model, "--device", a.device]
    rows, notes = {}, []
    fits, why = (False, "left out (--skip-edge-index)") if a.skip_edge_index else edge_index_fits(a.dataset, a.hidden)
    if not fits:
        notes.append(f"PyG edge_index skipped: {why}")
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    ranks = [int(x) for x in a.ranks.split(",")]
    parts: dict[int, dict] = {}
    prof = None
    with tempfile.TemporaryDirectory() as tmp:
        for p in ranks:
            parts[p] = run_partition(me, a.dataset, p, Path(tmp) / f"p{p}")
        pyg_env = huge_pages(Path(tmp) / f"p{min(ranks)}", a.hidden)
        for kind in ("edge_index", "adj_t") if fits else ("adj_t",):
            rows[f"PyG {kind}"] = _result(me + ["--pyg", kind, "--dataset", a.dataset] + common, pyg_env)
        for p in ranks:
            d = Path(tmp) / f"p{p}"
            rows[f"gnn-dist P={p}"] = _result([mpiexec, "-n", str(p)] + me + ["--worker", str(d)] + common,
                                              huge_pages(d, a.hidden))
            if p == 1:
                prof = _result(me + ["--profile", str(d)] + common, huge_pages(d, a.hidden))
    peaks = machine_peaks(a.device)
    print_tables(a, rows, parts, notes, peaks, prof)


def print_tables(a, rows: dict, parts: dict, notes: list, peaks: dict, prof: dict | None) -> None:
    base = rows["PyG adj_t"]["epoch_s"]
    print(f"\n{a.dataset}, {a.model}, 2 layers, hidden {a.hidden}, {a.epochs} timed epochs, {os.cpu_count()} cores, "
          f"{a.device}")
    print(f"{'configuration':<16} {'epoch s':>8} {'vs PyG adj_t':>12} {'peak RSS/rank MB':>22} "
          f"{'partition s':>11} {'partition peak MB':>17} {'estimate MB':>11}")
    for name, r in rows.items():
        rss = "/".join(f"{m:.0f}" for m in r["rss_mb"])
        p = parts.get(int(name.split("=")[1])) if name.startswith("gnn") else None
        cells = (f"{p['seconds']:>11.1f} {p['rss_mb']:>17.0f} {p['estimate_mb']:>11.0f}" if p else
                 f"{'-':>11} {'-':>17} {'-':>11}")
        print(f"{name:<16} {r['epoch_s']:>8.3f} {r['epoch_s'] / base:>12.2f} {rss:>22} {cells}")
    for name, r in rows.items():
        if a.device == "cuda" and "placement" in r:
            notes.append(f"{name}: {r['placement']}")
    for line in notes:
        print(f"note: {line}")
    print(f"\nmachine peaks (measured here): memory bandwidth {peaks['bandwidth'] / 1e9:.1f} GB/s, dense fp32 "
          f"{peaks['flops'] / 1e9:.0f} GFLOP/s")
    if prof is None or a.model != "gcn":
        return
    roof = roofline(prof["n"], prof["nnz"], prof["dims"], prof["params"], peaks)
    what = "device time (the GPU's kernel records)" if prof["device"] else "CPU time (torch profiler, own time per operator)"
    print(f"\ngnn-dist P=1 epoch by kind of work ({prof['n']} nodes, {prof['nnz']} edges): {what} per epoch; "
          f"timed epoch {prof['timed']:.4f} s, profiled epoch's wall {prof['wall']:.4f} s")
    print(f"{'kind':<26} {'measured s':>10} {'roofline s':>10} {'x roofline':>10}")
    for kind in KINDS:
        m, r = prof["kinds"][kind], roof.get(kind)
        ratio = f"{m / r:>10.1f}" if r else f"{'-':>10}"
        print(f"{kind:<26} {m:>10.4f} {r if r is not None else float('nan'):>10.4f} {ratio}")
    total = sum(roof.values())
    if prof["device"]:
        busy = sum(prof["kinds"].values())
        print(f"{'device busy (sum)':<26} {busy:>10.4f} {total:>10.4f} {busy / total:>10.1f}")
        print(f"{'GPU idle in timed epoch':<26} {max(0.0, prof['timed'] - busy):>10.4f} {'-':>10} {'-':>10}")
    print(f"{'epoch (timed)':<26} {prof['timed']:>10.4f} {total:>10.4f} {prof['timed'] / total:>10.1f}")


if __name__ == "__main__":
    main()
