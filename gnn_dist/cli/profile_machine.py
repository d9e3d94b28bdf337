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
from typing import TYPE_CHECKING

from gnn_dist.cli.core_rates import compute_rates, median_of, per_core
from partition.errors import UsageError

if TYPE_CHECKING:
    from partition.machine import Machine


def add_parser(sub) -> None:
    p = sub.add_parser("profile-machine", help="measure this host for the cost model; write a machine profile",
                       description="Time sparse, dense and elementwise kernels on one core and the loopback link, "
                                   "and write the profile `--machine FILE` reads (partition, train).")
    p.add_argument("--out", required=True, metavar="FILE", help="the JSON profile to write")
    p.add_argument("--name", default=None, help="the profile's name (default: this host's name)")
    p.add_argument("--rows", type=int, default=None, help="rows of the timed operands (default 200000)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timings per kernel; the median is kept, the rate a kernel keeps inside a training step "
                        "(default 5)")
    p.add_argument("--median-of", nargs="+", metavar="PROFILE", default=None,
                   help="measure nothing: write the median of two or more profiles of this kind of host taken at "
                        "different times (each rate the median of those that measured it; a wide rate the median "
                        "of its ratio to the narrow rate, as the model prices it, kept within the wide rates "
                        "measured; a shared host's rates move by tens of percent from one profile to the next)")
    p.add_argument("--link", action="store_true",
                   help="measure the link among the launched ranks with all-to-alls as training sends them (run "
                        "under `mpiexec -n P` or the network lab's `run`; rank 0 writes the profile) instead of "
                        "this host's loopback")
    p.set_defaults(run=run)


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


def ranks_link(ctx, repeat: int, peer_bytes: int = 1 << 20) -> tuple[float, float, float]:
    """(bytes per second per rank and direction, seconds per peer of an all-to-all, CPU seconds per byte sent
    or received) among the launched ranks: 1 MiB per peer gives the rate, empty all-to-alls back to back the
    latency (what a meeting costs between ranks that compute is in `tiny_epoch`), each the median of `repeat`
    x 10; the CPU is what the rank's process spent (all its threads, and the kernel's network stack where it
    ran in them) on the payload, beyond the empty all-to-alls."""
    import torch
    import torch.distributed as dist

    p = ctx.world_size

    def a2a_seconds(values: int) -> tuple[float, float]:
        send, recv = torch.zeros(p * values), torch.empty(p * values)
        calls = [0]

        def ten() -> None:
            dist.barrier()
            for _ in range(10):
                dist.all_to_all_single(recv, send)
            calls[0] += 10

        cpu = time.process_time()
        wall = median_of(ten, repeat) / 10
        return wall, (time.process_time() - cpu) / calls[0]

    small, small_cpu = a2a_seconds(1)
    big, big_cpu = a2a_seconds(peer_bytes // 4)
    return link_rate(p, peer_bytes, small, big), small / max(p - 1, 1), wire_cpu(p, peer_bytes, small_cpu, big_cpu)


def link_rate(p: int, peer_bytes: int, small: float, big: float) -> float:
    """Bytes per second per rank and direction from an empty all-to-all (`small` s) and one of `peer_bytes`
    per peer (`big` s): the payload over the time it added. On loopback the two are close, and a disturbed
    run can time the empty one slower (CI saw 1.05e15 B/s from a difference clamped to 1 ns), so the added
    time is taken as at least a tenth of the big one: at most 10x the rate of the big all-to-all alone. (A
    floor of half cut a real profile's rate 28%: 4 local ranks' empty all-to-all took 2.4 ms, the payload
    added 1.4.)"""
    return (p - 1) * peer_bytes / max(big - small, big / 10, 1e-9)


def wire_cpu(p: int, peer_bytes: int, small_cpu: float, big_cpu: float) -> float:
    """CPU seconds per byte sent or received, from an all-to-all's CPU seconds empty (`small_cpu`) and with
    `peer_bytes` to each of its p - 1 peers (`big_cpu`): what the payload added, over the bytes the rank sent
    and received. 0 (not measured) where it is below what a profile keeps (a noisy difference)."""
    per_byte = max(0.0, big_cpu - small_cpu) / (2 * max(p - 1, 1) * peer_bytes)
    return per_byte if per_byte >= 1e-15 else 0.0  # partition.machine.LIMITS' floor


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
    link, latency, cpu_per_byte = ranks_link(ctx, args.repeat)
    dist.barrier()
    rates = compute_rates(args.rows, args.repeat, ctx.local_size)  # every rank at once, as in training: they share the cores
    dist.barrier()
    rates["epoch_fixed_s"] = tiny_epoch(ctx)
    rates["wire_cpu_s_per_byte"] = cpu_per_byte
    table = torch.zeros(ctx.world_size, len(rates), dtype=torch.float64)
    table[ctx.rank] = torch.tensor([rates[k] for k in sorted(rates)], dtype=torch.float64)
    dist.all_reduce(table)
    if ctx.rank != 0:
        return None
    busy = min(ctx.local_size, cores)  # cores the host's ranks kept busy (a fraction on an emulated host)
    hosts = max(1, ctx.world_size // ctx.local_size)  # the rates summed over every host's ranks: a host's mean
    summed = dict(zip(sorted(rates), table.sum(0).tolist()))
    means = ("epoch_fixed_s", "wire_cpu_s_per_byte")  # the ranks' means, not rates per core
    rates_per_core = {k: v / (busy * hosts) for k, v in summed.items() if k not in ("step_s", "cache_bytes", *means)}
    rates_per_core["cache_bytes"] = rates["cache_bytes"]
    rates_per_core["step_s"] = summed["step_s"] / ctx.world_size * busy / ctx.local_size  # mean step, at a core each
    rates_per_core.update({k: summed[k] / ctx.world_size for k in means})
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


def median_of_files(args: argparse.Namespace) -> "Machine":
    """The median of the profiles `--median-of` names (partition.machine.median_profile), its flags checked:
    two or more distinct files, none of them `--out` (the inputs are kept), and no flag of a measurement
    (nothing is timed, so a --rows or --repeat given would be silently ignored)."""
    from pathlib import Path

    from partition.machine import load, median_profile

    for flag, given in (("--link", args.link), ("--rows", args.rows is not None), ("--repeat", args.repeat is not None)):
        if given:
            raise UsageError(f"--median-of measures nothing: leave out {flag}")
    files = [Path(f).resolve() for f in args.median_of]
    if len(files) < 2 or len(set(files)) < len(files):
        raise UsageError(f"--median-of takes two or more distinct profiles, got {' '.join(args.median_of)}")
    if Path(args.out).resolve() in files:
        raise UsageError(f"--out {args.out} is one of the profiles --median-of reads: write the median elsewhere")
    check_out(args)
    found = [load(f) for f in args.median_of]
    names = {m.name for m in found}
    name = args.name or f"median of {len(found)} profiles" + (f" of {names.pop()}" if len(names) == 1 else "")
    return median_profile(found, name[:100])


def run(args: argparse.Namespace) -> int:
    from partition.machine import save

    if args.median_of is not None:  # a profile from profiles measured before: nothing timed
        machine = median_of_files(args)
        save(machine, args.out)
        print(machine.describe())
        print(f"wrote {args.out}")
        return 0
    args.rows = 200_000 if args.rows is None else args.rows
    args.repeat = 5 if args.repeat is None else args.repeat
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
