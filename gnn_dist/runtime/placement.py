"""Where a rank computes and how its collectives travel: the CPU, a GPU of its own, or a GPU it shares.

- no GPU, or `--backend gloo`: the CPU, gloo (small halo plans over MPI, `gnn_dist.runtime.transport`);
- every rank of every host has a GPU of its own: that GPU, NCCL;
- more ranks on a host than GPUs, or `--backend staged` (nodes without GPUDirect): GPU `local_rank mod
  GPUs`, gloo for every group, device tensors through pinned host memory (`gnn_dist.runtime.staging`).

NCCL refuses two ranks on one GPU, so sharing needs the staged path. Every rank must pick the same
backend: under mpiexec they agree (`agree`: all hosts have a GPU per rank, or NCCL for none).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from gnn_dist.runtime import staging
from gnn_dist.runtime.staging import HOST_ENV
from partition.errors import LaunchError

BACKENDS = ("gloo", "nccl", "staged")


@dataclass(frozen=True)
class Placement:
    backend: str  # torch.distributed backend of every group
    device: torch.device
    staged: bool  # device tensors cross through host buffers
    note: str | None  # the line rank 0 prints (None on the CPU: nothing to choose there)


def choose(backend: str | None, local_rank: int, local_size: int, gpus: int,
           agree: Callable[[bool], bool] = lambda own: own) -> Placement:
    """The placement of local rank `local_rank` of `local_size` on a host with `gpus` GPUs; `agree(own)`
    is True where every rank's host has a GPU per rank (a collective: every rank calls it, whatever `backend`)."""
    if backend not in (None,) + BACKENDS:
        raise LaunchError(f"unknown backend '{backend}' (choose from {', '.join(BACKENDS)})")
    own = agree(local_size <= gpus)
    if backend == "gloo" or (backend is None and gpus == 0):
        if os.environ.get(HOST_ENV) == "1":
            return Placement("gloo", torch.device("cpu"), True, f"{HOST_ENV}=1: CPU tensors staged through host "
                                                                "buffers, as a shared GPU's are (for tests)")
        return Placement("gloo", torch.device("cpu"), False, None)
    if gpus == 0:
        raise LaunchError(f"--backend {backend} needs CUDA, and this torch sees no GPU (use gloo)")
    device = torch.device(f"cuda:{local_rank % gpus}")
    if backend == "nccl" and not own:
        raise LaunchError(f"{local_size} ranks on this host but {gpus} GPU(s): NCCL needs one GPU per rank (leave "
                          f"--backend out to share GPUs through host memory, or launch fewer ranks per host)")
    if backend == "nccl" or (backend is None and own):
        return Placement("nccl", device, False, f"{local_size} rank(s) on this host, one GPU each: NCCL")
    why = "--backend staged" if backend == "staged" else f"{local_size} ranks share {gpus} GPU(s) on this host"
    return Placement("gloo", device, True, f"{why}: halo and collectives staged through pinned host memory "
                                           f"(host transports: gloo, MPI for small halo plans)")


def apply(place: Placement, rank: int) -> tuple[str, torch.device]:
    """Make `place` this process's (its GPU current, staging on or off; rank 0 prints the line naming it);
    returns its backend and device."""
    if place.device.type == "cuda":
        torch.cuda.set_device(place.device)
    staging.enable(place.device if place.staged else None)
    if place.note and rank == 0:
        sys.stderr.write(f"[gnn-dist] {place.note}\n")
    return place.backend, place.device


def mpi_all(flag: bool) -> bool:
    """True on every rank if `flag` is True on every rank (MPI_COMM_WORLD)."""
    from mpi4py import MPI

    return bool(MPI.COMM_WORLD.allreduce(bool(flag), op=MPI.LAND))
