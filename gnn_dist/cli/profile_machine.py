"""`gnn-dist profile-machine`: measure this host's rates for the cost model and write a machine profile.

Each rate is timed on one thread with the kernels training uses (the sparse product is gnn_dist's CSR
product, the dense ones torch's), at sizes like a layer's; the link is this host's loopback (ranks on
one host talk through it). The network lab (scripts/netlab.py) writes its links over a measured profile.
Among launched ranks (`--link`) it also times an epoch of a tiny graph's training with those ranks: what
every epoch costs whatever the graph (`tiny_epoch`, the profile's `epoch_fixed_s`).
"""
from __future__ import annotations

import argparse
import os
import socket
import threading
import time

from partition.errors import UsageError


def add_parser(sub) -> None:
    p = sub.add_parser("profile-machine", help="measure this host for the cost model; write a machine profile",
                       description="Time sparse, dense and elementwise kernels on one core and the loopback link, "
                                   "and write the profile `--machine FILE` reads (partition, train).")
    p.add_argument("--out", required=True, metavar="FILE", help="the JSON profile to write")
    p.add_argument("--name", default=None, help="the profile's name (default: this host's name)")
    p.add_argument("--rows", type=int, default=200_000, help="rows of the timed operands (default 200000)")
    p.add_argument("--repeat", type=int, default=5,
                   help="timings per kernel; the median is kept, the rate a kernel keeps inside a training step "
                        "(default 5)")
    p.add_argument("--link", action="store_true",
                   help="measure the link among the launched ranks with all-to-alls as training sends them (run "
                        "under `mpiexec -n P` or the network lab's `run`; rank 0 writes the profile) instead of "
                        "this host's loopback")
    p.set_defaults(run=run)


def median_of(fn, repeat: int) -> float:
    """The median of `repeat` calls after one warm-up: the rate a kernel keeps inside a training step. (The
    fastest call would be the kernel alone, faster than training ever runs it beside its other ranks: tried
    on 2026-12-05, it predicted every local row of docs/benchmarks.md's table far too fast. Against other
    jobs on a shared host, take the profile and the run under one lock instead.)"""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


# (input, output) widths timed: GCN's layers at the default hidden 16 and at 128, narrow and wide
WIDTHS = ((32, 16), (16, 8), (128, 16), (16, 128), (128, 128))


def cache_bytes() -> int:
    """This host's last-level cache (0 where the OS does not say: every read priced cold). A part whose rows
    fit its share of it reads them there; what no longer fits comes from memory at the random-column rate."""
    from pathlib import Path

    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() != "Instruction":
                size = (index / "size").read_text().strip().upper()
                unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
                sizes[int((index / "level").read_text())] = int(size.rstrip("KMG")) * unit
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else 0


def per_core(rates: dict, fraction: float) -> dict:
    """Rates one thread measured under a quota of `fraction` of a core (< 1: a throttled thread runs that share
    of the wall time) as a whole core's, so that the model, pricing the host at its fraction, counts it once.
    The kernels run for many CFS periods (tens of ms at the default rows), so throttling averages out."""
    out = {k: v / fraction if k.endswith("_per_core") else v for k, v in rates.items()}
    out["step_s"] = rates["step_s"] * fraction
    return out


def compute_rates(rows: int, repeat: int, sharing: int = 1) -> dict:
    """Sparse edge-columns, dense flops and elementwise values per second on one thread, each kernel as a
    training step runs it: fresh outputs, the dense products of forward and backward, the mean over widths;
    the sparse product from memory and from cache (`sparse_rates`), `sharing` ranks timed at once."""
    import torch

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cache = cache_bytes()
    try:
        sparse, hot, per_row, dense, elem = [], [], [], [], []
        for d_in, d_out in WIDTHS:
            cold_rate, hot_rate = sparse_rates(rows, d_in, cache // sharing, repeat)
            one_edge = sparse_rates(rows, d_in, cache // sharing, repeat, degree=1, cold=False)[1]
            cold_rate, hot_rate, row_rate = split_row_cost(cold_rate, hot_rate, one_edge, 10)
            sparse.append(cold_rate)
            hot.append(hot_rate)
            per_row.append(row_rate)
            x, w, g = torch.randn(rows, d_in), torch.randn(d_in, d_out), torch.randn(rows, d_out)
            dense.append(6.0 * rows * d_in * d_out / median_of(lambda: (x @ w, x.t() @ g, g @ w.t()), repeat))
            elem.append(elementwise_rate(x, repeat))
    finally:
        torch.set_num_threads(threads)
    return {"sparse_per_core": _harmonic(sparse), "sparse_hot_per_core": _harmonic(hot), "cache_bytes": float(cache),
            "sparse_row_per_core": _harmonic(per_row) if all(per_row) else 0.0,
            "dense_per_core": _harmonic(dense), "elementwise_per_core": _harmonic(elem), "step_s": step_seconds(repeat)}


def elementwise_rate(x, repeat: int) -> float:
    """Values per second of the passes the cost model counts as elementwise, as a step runs them: dropout
    (training's hashed mask, forward and backward) and a bias (added forward, summed backward). Four
    passes over x; x + b and ReLU alone ran 2.4x faster than the dropout kernel here, so the rate of
    plain passes priced a step's elementwise work too cheap."""
    import torch

    from gnn_dist.nn.dropout import dropout
    from gnn_dist.runtime import streams

    b, g = torch.randn(x.shape[1]), torch.randn_like(x)
    leaf = x.clone().requires_grad_(True)

    def passes() -> tuple:
        leaf.grad = None
        dropout(leaf, 0.5, True).backward(g)
        return (x + b, g.sum(0))

    streams.begin(0, 0, 0)
    try:
        return 4 * x.numel() / median_of(passes, repeat)
    finally:
        streams.end()


def split_row_cost(cold: float, hot: float, one_edge: float, degree: int) -> tuple[float, float, float]:
    """(cold and hot edge rates without the per-row work, the per-row rate) from products of `degree` edges a
    row (`cold`, `hot`: edge-columns per second) and of one edge a row from cache (`one_edge`). Per
    row-column, t1 = e + r and t_degree = degree e + r (e an edge's seconds, r the row's): r = (degree t1 -
    t_degree) / (degree - 1). Where noise makes r come out negative, the row rate is 0 (not measured) and
    the edge rates stay as measured, the row's work folded in."""
    t1, t_many = 1.0 / one_edge, degree / hot
    row_s = (degree * t1 - t_many) / (degree - 1)
    if row_s <= 0 or row_s / degree >= min(1.0 / cold, 1.0 / hot):
        return cold, hot, 0.0
    return 1.0 / (1.0 / cold - row_s / degree), 1.0 / (1.0 / hot - row_s / degree), 1.0 / row_s


def sparse_rates(rows: int, width: int, share: int, repeat: int, degree: int = 10,
                 cold: bool = True) -> tuple[float, float]:
    """Edge-columns per second of `rows` output rows of `degree` random columns each, `width` wide: the
    columns among rows twice the cache `share` (each read from memory), and among rows a quarter of it (each
    read from cache, as a power-law graph's hubs or a small part's rows; a quarter leaves room for the
    streams the product also reads and writes, which at a full share evict rows). Without a known cache,
    both cold. `cold=False`: the second only (the first 0)."""
    import warnings

    import torch

    from gnn_dist.graph.local import spmm

    crow = torch.arange(0, rows * degree + 1, degree, dtype=torch.int64)

    def rate(among: int) -> float:
        col = torch.randint(0, among, (rows * degree,), dtype=torch.int64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's note that sparse CSR is in beta
            a = torch.sparse_csr_tensor(crow, col, torch.rand(rows * degree), (rows, among))
        x = torch.randn(among, width)
        return rows * degree * width / median_of(lambda: spmm(a, x), repeat)

    row_bytes = 4 * width
    from_memory = rate(max(rows, 2 * share // row_bytes)) if cold or not share else 0.0
    return from_memory, (rate(max(1, share // 4 // row_bytes)) if share else from_memory)


def step_seconds(repeat: int) -> float:
    """A GCN training step on a graph too small to weigh anything (a 20 x 20 grid), on one thread: the
    fixed cost of every step (Python, autograd, the optimiser, small tensors)."""
    import torch
    import torch.nn.functional as F

    from gnn_dist.data.synthetic import grid
    from gnn_dist.graph.local import LocalGraph
    from gnn_dist.nn.models import build_model
    from gnn_dist.runtime import streams

    g = LocalGraph.from_graph(grid(width=20, height=20, features=16))
    model = build_model("gcn", g.num_features, 16, int(g.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def step() -> None:
        streams.begin(0, 0, 0)
        try:
            opt.zero_grad()
            loss = F.cross_entropy(model(g.x, g)[g.train_mask], g.y[g.train_mask])
            loss.backward()
            opt.step()
        finally:
            streams.end()

    try:
        return median_of(lambda: [step() for _ in range(10)], repeat) / 10
    finally:
        torch.set_num_threads(threads)


def _harmonic(rates: list[float]) -> float:
    """The rate at which equal work at each width would run: the harmonic mean."""
    return len(rates) / sum(1.0 / r for r in rates)


def loopback_link(repeat: int, size: int = 8 << 20) -> tuple[float, float]:
    """(bytes per second, seconds per message) between two endpoints on this host."""
    a, b = socket.socketpair()
    payload = bytes(size)

    def drain(n: int) -> None:
        got = 0
        while got < n:
            got += len(b.recv(min(1 << 20, n - got)))

    try:
        rates = []
        for _ in range(repeat):
            reader = threading.Thread(target=drain, args=(size,))
            reader.start()
            t = time.perf_counter()
            a.sendall(payload)
            reader.join()
            rates.append(size / (time.perf_counter() - t))
        n = 200
        t = time.perf_counter()
        for _ in range(n):  # ping-pong of one byte: twice the one-way latency a round
            a.sendall(b"x")
            b.recv(1)
            b.sendall(b"y")
            a.recv(1)
        latency = (time.perf_counter() - t) / (2 * n)
    finally:
        a.close()
        b.close()
    return max(rates), latency


def ranks_link(ctx, repeat: int, peer_bytes: int = 1 << 20) -> tuple[float, float]:
    """(bytes per second per rank and direction, seconds per peer of an all-to-all) among the launched ranks:
    1 MiB per peer gives the rate, empty all-to-alls back to back the latency (what a meeting costs between
    ranks that compute is in `tiny_epoch`), each the median of `repeat` x 10."""
    import torch
    import torch.distributed as dist

    p = ctx.world_size

    def a2a_seconds(values: int) -> float:
        send, recv = torch.zeros(p * values), torch.empty(p * values)

        def ten() -> None:
            dist.barrier()
            for _ in range(10):
                dist.all_to_all_single(recv, send)
        return median_of(ten, repeat) / 10

    small = a2a_seconds(1)
    big = a2a_seconds(peer_bytes // 4)
    return link_rate(p, peer_bytes, small, big), small / max(p - 1, 1)


def link_rate(p: int, peer_bytes: int, small: float, big: float) -> float:
    """Bytes per second per rank and direction from an empty all-to-all (`small` s) and one of `peer_bytes`
    per peer (`big` s): the payload over the time it added. On loopback the two are close, and a disturbed
    run can time the empty one slower (CI saw 1.05e15 B/s from a difference clamped to 1 ns), so the added
    time is taken as at least a tenth of the big one: at most 10x the rate of the big all-to-all alone. (A
    floor of half cut a real profile's rate 28%: 4 local ranks' empty all-to-all took 2.4 ms, the payload
    added 1.4.)"""
    return (p - 1) * peer_bytes / max(big - small, big / 10, 1e-9)


TINY = {"width": 30, "height": 30, "features": 16}  # the graph of `tiny_epoch`: too small to weigh anything


def tiny_epoch(ctx, epochs: int = 100) -> float:
    """Wall seconds per epoch (training's `epoch_time`) of GCN training on a graph too small to weigh
    anything (a 30 x 30 grid in contiguous blocks, one per rank) among the launched ranks: what every epoch
    costs whatever the graph (Python, autograd, the exchange's machinery, gloo's threads, the meetings'
    wake-ups). A step alone in one process (`step_seconds`) and empty all-to-alls back to back miss most
    of it: 4 ranks sharing 2 cores here took 17.7 ms an epoch, each rank 10 ms of CPU (all its threads),
    against a step of 1.0 ms alone and 0.5 ms a peer for an empty all-to-all."""
    import numpy as np
    import torch

    from gnn_dist.data.synthetic import grid
    from gnn_dist.graph.local import LocalGraph
    from gnn_dist.nn.models import build_model
    from gnn_dist.runtime.exchange import HaloExchange, HaloPlan
    from gnn_dist.train.node import Trainer
    from partition import build_parts

    g = grid(**TINY)
    p = ctx.world_size
    plan = next(pl for k, pl in enumerate(build_parts(g, np.arange(g.num_nodes) * p // g.num_nodes, p)) if k == ctx.rank)
    halo = HaloExchange.connect(HaloPlan(torch.from_numpy(plan.send_idx), plan.send_counts, plan.recv_counts),
                                ctx.halo_group, ctx.rank)
    graph = LocalGraph.from_plan(plan, g.num_classes, p, halo)
    trainer = Trainer(build_model("gcn", g.num_features, 16, g.num_classes), graph, ctx, eval_every=0, progress="none")
    trainer.fit(5)  # warm: first epochs build operators and buffers
    trainer.history.clear()
    trainer.fit(epochs)
    times = [r["epoch_time"] for r in trainer.history]
    return sum(times) / max(len(times), 1)


def measure(args: argparse.Namespace):
    """The profile, or None on ranks other than 0 (with --link)."""
    from gnn_dist.runtime.cgroups import usable_cpus
    from partition.machine import Machine

    cores = usable_cpus()  # the affinity, or a CPU quota where smaller: an emulated host of 0.22 core says 0.22
    if not args.link:
        link, latency = loopback_link(args.repeat)
        return Machine(name=args.name or socket.gethostname(), cores_per_host=cores, ranks_per_host=0,
                       link_bytes_per_s=link, latency_s=latency,
                       **per_core(compute_rates(args.rows, args.repeat), min(1.0, cores)))
    import torch
    import torch.distributed as dist

    from gnn_dist.runtime.launch import init

    ctx = init(backend="gloo", transport="gloo")
    if ctx.world_size < 2:
        raise UsageError("--link measures the link among launched ranks: run under mpiexec -n P (P >= 2) or the "
                         "network lab")
    link, latency = ranks_link(ctx, args.repeat)
    dist.barrier()
    rates = compute_rates(args.rows, args.repeat, ctx.local_size)  # every rank at once, as in training: they share the cores
    dist.barrier()
    rates["epoch_fixed_s"] = tiny_epoch(ctx)
    table = torch.zeros(ctx.world_size, len(rates), dtype=torch.float64)
    table[ctx.rank] = torch.tensor([rates[k] for k in sorted(rates)], dtype=torch.float64)
    dist.all_reduce(table)
    if ctx.rank != 0:
        return None
    busy = min(ctx.local_size, cores)  # cores the host's ranks kept busy (a fraction on an emulated host)
    hosts = max(1, ctx.world_size // ctx.local_size)  # the rates summed over every host's ranks: a host's mean
    summed = dict(zip(sorted(rates), table.sum(0).tolist()))
    rates_per_core = {k: v / (busy * hosts) for k, v in summed.items() if k not in ("step_s", "cache_bytes", "epoch_fixed_s")}
    rates_per_core["cache_bytes"] = rates["cache_bytes"]
    rates_per_core["step_s"] = summed["step_s"] / ctx.world_size * busy / ctx.local_size  # mean step, at a core each
    rates_per_core["epoch_fixed_s"] = summed["epoch_fixed_s"] / ctx.world_size  # the ranks' mean
    rates_per_core["epoch_fixed_ranks"] = ctx.world_size  # it holds for as many ranks: partition says when parts differ
    return Machine(name=args.name or socket.gethostname(), cores_per_host=cores,
                   ranks_per_host=0 if ctx.local_size == ctx.world_size else ctx.local_size,
                   link_bytes_per_s=link, latency_s=latency, **rates_per_core)


MAX_ROWS = 2_000_000  # the operands take about 1.7 KB a row (128 columns, 10 edges a row): 3.4 GB here


def check_out(args: argparse.Namespace) -> None:
    """The profile can be written where asked, and its name read back (one line, before measuring)."""
    from pathlib import Path

    from partition.machine import good_name

    out = Path(args.out)
    if args.link:  # only rank 0 writes, and other hosts may not have its folder: a rank failing alone would hang
        pass
    elif out.is_dir():
        raise UsageError(f"--out {out} is a folder; give the JSON file to write")
    elif not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist or is not writable")
    if args.name is not None and not good_name(args.name):
        raise UsageError(f"--name must be a printable string of 1 to 100 characters, got {args.name[:40]!r}")


def run(args: argparse.Namespace) -> int:
    from partition.machine import save

    if not 1000 <= args.rows <= MAX_ROWS or not 1 <= args.repeat <= 1000:
        raise UsageError(f"--rows must be 1000 to {MAX_ROWS} and --repeat 1 to 1000, got {args.rows} and {args.repeat}")
    check_out(args)  # before minutes of measuring
    machine = measure(args)
    if machine is None:
        return 0
    save(machine, args.out)
    print(machine.describe())
    print(f"wrote {args.out}")
    return 0
