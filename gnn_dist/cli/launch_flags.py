"""Flags for how ranks start and meet (train), and the GPU memory share (train and predict)."""
from __future__ import annotations

import argparse

from partition.errors import LaunchError


def add_launch_flags(p) -> None:
    """How the ranks start and meet: backend, halo transport, interface, timeouts."""
    p.add_argument("--backend", default=None, choices=["gloo", "nccl", "staged"],
                   help="default: nccl where each rank has a GPU of its own, staged where ranks share GPUs, gloo "
                        "without CUDA; gloo trains on the CPU; staged: GPUs with every collective through pinned "
                        "host memory (nodes without GPUDirect)")
    p.add_argument("--transport", default="auto", choices=["auto", "gloo"],
                   help="CPU halo all-to-alls: auto (under mpiexec with no more ranks than cores per host, plans "
                        "of at most 16384 rows per all-to-all go over MPI, 75x less latency than gloo on one host; "
                        "the rest over gloo) or gloo (all)")
    p.add_argument("--iface", default=None, help="network interface for rendezvous and gloo (default: automatic)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds any collective may take (default 120)")
    p.add_argument("--heartbeat-timeout", type=float, default=60.0, metavar="S", help="a rank whose heartbeat "
                   "process is silent this long is lost (default 60; a busy or stopped rank keeps beating)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="intra-op threads per rank (default: its CPU affinity over the ranks sharing it, or its "
                        "cgroup's CPU quota over the ranks under it, the smaller; at least 1)")
    add_gpu_memory_flag(p)


def gpu_memory_fraction(text: str) -> float:
    """--gpu-memory-fraction's value, checked as it is parsed (train and predict alike) by the rule `init` applies."""
    from gnn_dist.runtime.placement import check_fraction

    try:
        value = float(text)
        check_fraction(value)
    except (ValueError, LaunchError) as e:
        raise argparse.ArgumentTypeError(str(e).replace("--gpu-memory-fraction ", "") if isinstance(e, LaunchError)
                                         else f"must be a number in (0, 1], got '{text}'") from None
    return value


def add_gpu_memory_flag(p) -> None:
    p.add_argument("--gpu-memory-fraction", type=gpu_memory_fraction, default=None, metavar="F",
                   help="share of its GPU's memory each rank may take, 0 < F <= 1 (default: 1/(ranks on the GPU) "
                        "where ranks share one, else no cap)")
