"""Collectives of device tensors through host buffers: ranks that share a GPU, nodes without GPUDirect.

NCCL refuses two ranks on one GPU, so where ranks share a device (`gnn_dist.runtime.placement`) every
group runs on gloo (the halo's small plans on MPI, `gnn_dist.runtime.transport`) and a tensor on the
device crosses through a host copy: device to pinned host memory, the collective on the host copies,
host back to device. Nothing else changes: the exchange encodes and decodes on the device as with NCCL,
and the bytes it hands the transport (fp32 rows, or a codec's byte records) travel unchanged.

On CUDA the device-to-host copy runs on the caller's stream, which the host then waits for (the
collective reads the host copy next); the exchange calls from its side stream, so the default
stream's compute queued meanwhile goes on. The host-to-device copy of a received block is queued,
not waited for, on the stream that waits for the transfer (again the exchange's side stream), after
the collective completes; the pinned block stays reserved until that copy has run (torch's host
allocator records it).

The logic is the same for any device: `enable(torch.device("cpu"))` stages CPU tensors through
separate host buffers, which is how the CPU tests prove staged results equal direct ones bit for
bit (GNN_DIST_STAGE_HOST=1 asks the launcher for that on a CPU run). Only `pin` differs by device.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

HOST_ENV = "GNN_DIST_STAGE_HOST"  # "1": a CPU run stages its CPU tensors too (tests the staged path without a GPU)
_DEVICE: list[str | None] = [None]  # the device type whose tensors are staged; None: staging off
COUNTS = {"to_host_bytes": 0, "to_device_bytes": 0, "calls": 0}  # what crossed, for tests and measurements


def enable(device: torch.device | None) -> None:
    """Stage the collectives of tensors on `device`'s type from now on (None: stop staging)."""
    _DEVICE[0] = None if device is None else torch.device(device).type


def active() -> bool:
    return _DEVICE[0] is not None


def staged(*tensors: torch.Tensor) -> bool:
    """Whether a collective of these tensors crosses through host buffers."""
    return _DEVICE[0] is not None and any(t.device.type == _DEVICE[0] for t in tensors)


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A host copy of `t`, complete when this returns (pinned for a device tensor), in its dtype and shape."""
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.device.type == "cuda")
    host.copy_(t)  # CUDA: queued on the current stream, which the copy then waits for
    COUNTS["to_host_bytes"] += host.numel() * host.element_size()
    COUNTS["calls"] += 1
    return host


def empty_host(t: torch.Tensor) -> torch.Tensor:
    """A host buffer to receive into, shaped like `t`."""
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=t.device.type == "cuda")


def to_device(host: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out <- host, queued on the current stream (CUDA: not waited for; `host` stays reserved until it ran)."""
    out.copy_(host, non_blocking=True)
    COUNTS["to_device_bytes"] += host.numel() * host.element_size()
    return out


class StagedWork:
    """A collective on host copies, in flight: `wait` waits for it, then queues the copy into `out`."""

    def __init__(self, work, host_out: torch.Tensor, out: torch.Tensor, keep: tuple = ()):
        self.work, self.host_out, self.out, self.keep = work, host_out, out, keep

    def wait(self, timeout=None) -> bool:
        if self.out is not None:
            if self.work is not None:
                self.work.wait()
            to_device(self.host_out, self.out)
            self.work = self.host_out = self.out = self.keep = None
        return True

    def is_completed(self) -> bool:
        return self.out is None or self.work is None or bool(self.work.is_completed())


def all_to_all(run, output: torch.Tensor, input: torch.Tensor, async_op: bool):
    """`run(host_out, host_in)` (an async all-to-all of host tensors, returning its work) on host copies of
    `input`, its result landing in `output`; returns a StagedWork if `async_op`, else None once it landed."""
    host_in, host_out = to_host(input), empty_host(output)
    work = StagedWork(run(host_out, host_in), host_out, output, keep=(host_in,))
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(t: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    """`dist.all_reduce(t)` in place, through a host copy where `t` is staged."""
    return _in_place(lambda x: dist.all_reduce(x, op=op, group=group), t)


def broadcast(t: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """`dist.broadcast(t, src)` in place, through a host copy where `t` is staged."""
    return _in_place(lambda x: dist.broadcast(x, src, group=group), t)


def _in_place(collective, t: torch.Tensor) -> torch.Tensor:
    if not staged(t):
        collective(t)
        return t
    host = to_host(t)
    collective(host)
    return to_device(host, t)
