"""Where a rank computes and how its collectives travel: the CPU, a GPU of its own, or a GPU it shares.

- no GPU, or `--backend gloo`: the CPU, gloo (small halo plans over MPI, `gnn_dist.runtime.transport`);
- no two ranks hold the same physical GPU: that GPU, NCCL;
- two or more ranks hold one GPU, or `--backend staged` (nodes without GPUDirect): GPU `local_rank mod
  visible GPUs`, gloo for every group, device tensors through pinned host memory (`gnn_dist.runtime.staging`).

Sharing is judged by the GPUs' UUIDs, not by counting: under per-rank binding (SLURM `--gpu-bind`,
Kubernetes) four ranks on four GPUs each see one GPU, `cuda:0`, and still hold a GPU each
(`gnn_dist.runtime.gpus` gathers who holds what). NCCL refuses two ranks on one GPU, so sharing needs the
staged path, and each rank on a shared GPU gets an equal share of its memory (1 / the ranks on it;
`--gpu-memory-fraction` sets another), so that one rank's caching allocator cannot starve the others.
Every rank must pick the same backend: all decide from the same table of holders (or, where only this
host's table is known, `agree`).

This module decides from plain data; the CUDA, NVML, MPI and store calls are in `gnn_dist.runtime.gpus`.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from gnn_dist.runtime import staging
from gnn_dist.runtime.staging import HOST_ENV
from partition.errors import LaunchError

BACKENDS = ("gloo", "nccl", "staged")


@dataclass(frozen=True)
class Holder:
    """The GPU one rank would use, as every rank learns it."""
    host: str
    gpu: str  # its UUID ("GPU-..."), unique across hosts; without one, a name qualified by the host
    exclusive: bool | None = None  # in exclusive-process compute mode (None: unknown)


@dataclass(frozen=True)
class Placement:
    backend: str  # torch.distributed backend of every group
    device: torch.device
    staged: bool  # device tensors cross through host buffers
    note: str | None  # the line rank 0 prints (None on the CPU: nothing to choose there)
    memory_fraction: float | None = None  # of its GPU's memory this rank's allocator may take (None: no cap)


def check_fraction(fraction: float | None) -> None:
    """Refuse a memory fraction outside (0, 1] before any rank meets another."""
    if fraction is not None and not 0 < fraction <= 1:
        raise LaunchError(f"--gpu-memory-fraction must be in (0, 1] (a share of one GPU's memory), got {fraction:g}")


def host_holders(local_size: int, gpus: int, host: str = "") -> list[Holder | None]:
    """The table where ranks are not bound to GPUs of their own: every rank of a host sees the same `gpus`
    GPUs, and local rank r holds GPU r mod `gpus` (None for every rank without one)."""
    name = f"{host}/cuda:" if host else "cuda:"
    return [Holder(host, f"{name}{r % gpus}") if gpus else None for r in range(local_size)]


def choose(backend: str | None, local_rank: int, local_size: int, gpus: int,
           agree: Callable[[bool], bool] = lambda own: own, holders: Sequence[Holder | None] | None = None,
           me: int | None = None, fraction: float | None = None) -> Placement:
    """The placement of local rank `local_rank` of `local_size`, which sees `gpus` GPUs.

    `holders`: the GPU each rank holds (None: none), this rank's at index `me`: the world's under mpiexec,
    so that every rank decides alike; default `host_holders` (this host's, ranks not bound to GPUs).
    `agree(own)` is True where every rank's table has no GPU held twice and no rank without one (a
    collective: every rank calls it, whatever `backend`). `fraction` overrides the equal memory share.
    """
    if backend not in (None,) + BACKENDS:
        raise LaunchError(f"unknown backend '{backend}' (choose from {', '.join(BACKENDS)})")
    check_fraction(fraction)
    if holders is None:
        holders, me = host_holders(local_size, gpus), local_rank
    counts = Counter(h.gpu for h in holders if h is not None)
    shared = sorted((g for g, n in counts.items() if n > 1), key=lambda g: -counts[g])
    own = agree(bool(holders) and None not in holders and not shared)
    for gpu in shared if backend != "gloo" else ():  # every rank refuses, a rank without a GPU too
        if any(h is not None and h.gpu == gpu and h.exclusive for h in holders):
            raise LaunchError(f"GPU {gpu} is in exclusive-process mode and {counts[gpu]} ranks would share it: set "
                              f"`nvidia-smi -c DEFAULT` on its host or launch one rank per GPU")
    if backend == "gloo" or (backend is None and gpus == 0):
        if os.environ.get(HOST_ENV) == "1":
            return Placement("gloo", torch.device("cpu"), True, f"{HOST_ENV}=1: CPU tensors staged through host "
                                                                "buffers, as a shared GPU's are (for tests)")
        return Placement("gloo", torch.device("cpu"), False, None)
    if gpus == 0:
        raise LaunchError(f"--backend {backend} needs CUDA, and this torch sees no GPU (use gloo)")
    device = torch.device(f"cuda:{local_rank % gpus}")
    if backend == "nccl" and not own:
        where = (f"GPU {shared[0]} is held by {counts[shared[0]]} ranks" if shared else
                 "a rank elsewhere shares a GPU or has none")
        raise LaunchError(f"{where}: NCCL needs one GPU per rank (leave --backend out to share GPUs through host "
                          f"memory, or launch one rank per GPU)")
    if backend == "nccl" or (backend is None and own):
        note = f"{local_size} rank(s) on this host, one GPU each: NCCL"
        return Placement("nccl", device, False, note + _capped(fraction), fraction)
    mine = counts[holders[me].gpu] if holders[me] is not None else 1
    share = fraction if fraction is not None else (1 / mine if mine > 1 else None)
    why = ("--backend staged" if backend == "staged" else
           f"{sum(counts[g] for g in shared)} ranks share {len(shared)} GPU(s)" if shared else
           "ranks elsewhere share GPUs")
    memory = _capped(fraction) or ("; each rank on a shared GPU may use 1/(ranks on it) of its memory"
                                   + (f" (rank {me}: {share:.3g})" if share else "") if shared else "")
    return Placement("gloo", device, True, f"{why}: halo and collectives staged through pinned host memory "
                                           f"(host transports: gloo, MPI for small halo plans){memory}", share)


def _capped(fraction: float | None) -> str:
    return f"; each rank may use {fraction:.3g} of its GPU's memory (--gpu-memory-fraction)" if fraction else ""


def apply(place: Placement, rank: int) -> tuple[str, torch.device]:
    """Make `place` this process's (its GPU current with its memory share, staging on or off; rank 0 prints
    the line naming it); returns its backend and device."""
    if place.device.type == "cuda":
        torch.cuda.set_device(place.device)
        if place.memory_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(place.memory_fraction, place.device)
    staging.enable(place.device if place.staged else None)
    if place.note and rank == 0:
        sys.stderr.write(f"[gnn-dist] {place.note}\n")
    return place.backend, place.device
