"""bench_scale's roofline half: the machine's measured peaks, the bytes and flops gnn-dist's GCN epoch must
move, and the profiled P=1 epoch by kind of work (the child process that profiles it, and its table).

Kept apart from bench_scale.py, which runs the rows (PyG and gnn-dist) and prints them; see its docstring
for what the table means. The byte counts are lower bounds: a sparse product reads each edge's source row
once (width x 4 B, plus 12 B of index and value) and writes its output once; an elementwise pass reads and
writes its tensor once.
"""
from __future__ import annotations

import json
import re
import time

KINDS = ("sparse products", "dense products", "elementwise and dropout", "exchange", "optimizer", "other")
SPMM_SCOPE = "gnn_dist.spmm"  # the profile child wraps every sparse product in this record


# ------------------------------------------------------------------ machine peaks
def machine_peaks(device: str, copy_mb: int = 512, matmul: int = 4096) -> dict:
    """Best of 5: bytes per second of a `copy_mb` MB copy (bytes read + bytes written), flops per second of a
    `matmul`^2 fp32 matmul. The check's dry run passes small sizes: the same code, in a second."""
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

    def copy_rate() -> float:  # its tensors are freed on return
        a = torch.rand(copy_mb * 2**20 // 4, device=device)
        b = torch.empty_like(a)
        return 2 * a.numel() * 4 / best(lambda: b.copy_(a))

    bw = copy_rate()
    x, y = torch.rand(matmul, matmul, device=device), torch.rand(matmul, matmul, device=device)
    return {"bandwidth": bw, "flops": 2 * matmul**3 / best(lambda: x @ y)}


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


def scoped_spmm() -> None:
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


# ------------------------------------------------------------------------ tables
def print_peaks(peaks: dict) -> None:
    print(f"\nmachine peaks (measured here): memory bandwidth {peaks['bandwidth'] / 1e9:.1f} GB/s, dense fp32 "
          f"{peaks['flops'] / 1e9:.0f} GFLOP/s", flush=True)


def print_breakdown(prof: dict, peaks: dict) -> None:
    """The P=1 epoch by kind of work beside each kind's roofline, one row at a time."""
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
    print(f"{'epoch (timed)':<26} {prof['timed']:>10.4f} {total:>10.4f} {prof['timed'] / total:>10.1f}", flush=True)
