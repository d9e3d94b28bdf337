"""Which physical GPU each rank holds, learnt by every rank: the facts `gnn_dist.runtime.placement` decides from.

A rank's GPU is `local_rank mod visible GPUs`; what it is physically is its UUID
(`torch.cuda.get_device_properties(i).uuid`). Counting GPUs cannot tell sharing: under per-rank
`CUDA_VISIBLE_DEVICES` (SLURM `--gpu-bind`, Kubernetes) every rank sees one GPU, `cuda:0`, a different
one each. UUIDs are unique across hosts, so the table needs no host to compare (the host names the GPU in
messages, and qualifies a GPU's name where torch gives no UUID).

How ranks learn each other's GPU:
- mpiexec: an allgather over MPI_COMM_WORLD, so every rank holds the same table and makes the same decision.
- torchrun: through torchrun's agent store (`TORCHELASTIC_USE_AGENT_STORE=True`, torchrun's default): it
  exists before any process group, so a short-lived client of it carries the table. Without an agent store
  (RANK and WORLD_SIZE set by hand), rank 0 would have to start the store here, before the sentinel forks
  (a fork after the store's threads exist is unsafe): instead each rank derives its host's table (every
  rank of a host sees the same GPUs, as torchrun starts them) and hosts are assumed alike.

Compute mode comes from NVML through ctypes (`libnvidia-ml.so.1`, shipped with every NVIDIA driver; torch
loads it the same way for `CUDA_VISIBLE_DEVICES` UUIDs): torch does not expose it, pynvml is not a
dependency, and `nvidia-smi` would be a subprocess per rank. It creates no CUDA context, which is what an
exclusive-process GPU would refuse the second rank.
"""
from __future__ import annotations

import ctypes
import datetime
import json
import os
import socket

import torch

from gnn_dist.runtime import placement
from gnn_dist.runtime.placement import Holder, Placement
from gnn_dist.runtime.rendezvous import Rendezvous

EXCLUSIVE_PROCESS = 3  # NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
_GATHERED = [0]  # tables gathered through a store by this process: each gets its own keys


def place(backend: str | None, rv: Rendezvous, torchrun: bool, fraction: float | None, timeout_s: float) -> Placement:
    """This rank's placement, decided from every rank's GPU (every rank calls it: it is a collective)."""
    gpus = torch.cuda.device_count() if backend != "gloo" and torch.cuda.is_available() else 0
    mine = holder(rv.local_rank, gpus)
    if not torchrun:
        from mpi4py import MPI

        table = MPI.COMM_WORLD.allgather(mine)
        return placement.choose(backend, rv.local_rank, rv.local_size, gpus, bool, table, rv.rank, fraction)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        table = store_allgather(mine, rv, timeout_s)
        return placement.choose(backend, rv.local_rank, rv.local_size, gpus, bool, table, rv.rank, fraction)
    table = [holder(r, gpus) for r in range(rv.local_size)]
    return placement.choose(backend, rv.local_rank, rv.local_size, gpus, bool, table, rv.local_rank, fraction)


def holder(local_rank: int, gpus: int) -> Holder | None:
    """The GPU local rank `local_rank` would use (`local_rank mod gpus`), None without one."""
    if gpus == 0:
        return None
    index, host = local_rank % gpus, socket.gethostname()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)  # torch >= 2.0
    if uuid is None:
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        return Holder(host, f"{host}/{visible[index] if index < len(visible) else f'cuda:{index}'}")
    gpu = uuid_name(str(uuid))
    return Holder(host, gpu, exclusive_process(gpu))


def uuid_name(text: str) -> str:
    """A UUID as NVML and nvidia-smi name it: torch prints CUDA's without the "GPU-" prefix."""
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def exclusive_process(uuid: str) -> bool | None:
    """Whether NVML reports the GPU `uuid` in exclusive-process compute mode; None where it cannot tell (no
    driver library, a MIG instance), and then nothing is refused up front."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
    except (OSError, AttributeError):
        return None
    try:
        handle, mode = ctypes.c_void_p(), ctypes.c_int(-1)
        if nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) != 0:
            return None
        if nvml.nvmlDeviceGetComputeMode(handle, ctypes.byref(mode)) != 0:
            return None
        return mode.value == EXCLUSIVE_PROCESS
    finally:
        nvml.nvmlShutdown()


def store_allgather(mine: Holder | None, rv: Rendezvous, timeout_s: float) -> list[Holder | None]:
    """Every rank's holder, through a client of torchrun's agent store at MASTER_ADDR:MASTER_PORT; the client
    is closed before the sentinel forks."""
    import torch.distributed as dist

    _GATHERED[0] += 1
    env = os.environ
    prefix = (f"gnn_dist/{env.get('TORCHELASTIC_RUN_ID', '')}-{env.get('TORCHELASTIC_RESTART_COUNT', '')}"
              f"/gpus/{_GATHERED[0]}/")
    store = dist.TCPStore(rv.addr, rv.port, rv.size, False, datetime.timedelta(seconds=timeout_s))
    try:
        store.set(f"{prefix}{rv.rank}", json.dumps(None if mine is None else [mine.host, mine.gpu, mine.exclusive]))
        return [None if v is None else Holder(*v)
                for v in (json.loads(store.get(f"{prefix}{r}")) for r in range(rv.size))]
    finally:
        del store
