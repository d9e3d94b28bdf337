"""`train --memory-report`: where a rank's peak memory goes, by what holds it, after the first epoch.

Each row is counted from the tensors themselves, or measured as it happens, not guessed:

- features: the input rows this rank owns (typed graphs: every type's);
- graph and operators: CSR arrays, ids, degrees, masks, and the sparse operators and edge lists built
  for the layers;
- halo buffers: the exchange's plan and the state it keeps between steps (the input halo fetched once,
  stale blocks, skip references);
- activations and step temporaries: what the first training step allocated and still held at its peak,
  where malloc held the most memory (`StepMeter`): the tensors autograd saved for backward, and the rest
  (gradients, the exchange's send and receive buffers, outputs nothing saved); what outlives the step is
  counted with its owner above;
- parameters and gradients, and optimiser state;
- numba kernels: the resident memory numba added while it was imported and compiled or loaded kernels
  (gnn_dist.runtime.kernels.numba_bytes; shared code pages included, as RSS counts them);
- allocator's free heap: glibc's free heap bytes at the step's peak, less what a trim had handed back to
  the kernel before (freed blocks it keeps resident for reuse, and the holes between live ones);
- runtime: the process's resident memory before the partition was read (interpreter, torch,
  the process group).

Beside them, the peak resident memory of the process so far, what of it no row explains (Python objects,
the partition files as read, a peak outside the first step), and the unique memory (USS) now.
"""
from __future__ import annotations

import contextlib
import resource
import sys

import numpy as np
import psutil
import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gnn_dist.runtime import kernels, malloc

MB = 2**20


def _nbytes(obj, seen: set) -> int:
    """Bytes of every tensor or array reachable through tuples, lists and dicts, each storage once."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.sparse_csr:
            return sum(_nbytes(t, seen) for t in (obj.crow_indices(), obj.col_indices(), obj.values()))
        key = obj.untyped_storage().data_ptr()
        if key in seen or obj.device.type == "meta":
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        if isinstance(base, np.memmap) or id(base) in seen:  # mapped pages belong to the file
            return 0
        seen.add(id(base))
        return int(base.nbytes)
    if isinstance(obj, dict):
        return sum(_nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, seen) for v in obj)
    if hasattr(obj, "__dataclass_fields__"):
        return sum(_nbytes(getattr(obj, f), seen) for f in obj.__dataclass_fields__)
    return 0


class StepMeter(TorchDispatchMode):
    """What one training step allocates, counted from its tensors: the storages autograd saves for backward
    (leaving out the ones in `known`), and every CPU storage an operator creates, at the step's peak.

    Each operator's new output storages (not views or in-place results of its inputs) are followed through
    weak references, so a storage is counted from the operator that allocated it until it is freed. After
    every operator, while its inputs are still alive, the meter reads how much memory malloc holds from
    the kernel; where that is highest (the step's peak; without glibc, where the step's tensors are), it
    keeps what was alive: activations saved by then, the rest (gradients, exchange buffers, outputs not
    saved: temporaries), and the heap's free bytes, which malloc keeps resident for reuse."""

    def __init__(self, known: set):
        super().__init__()
        self.known, self.saved, self.bytes = known, set(), 0  # bytes: everything saved in the step
        self.live: dict[int, tuple] = {}  # storage address -> (weak reference, bytes)
        self.peak, self.free = -1, 0  # malloc's footprint at the peak (or the tensors' total); its free bytes
        self.at_peak: dict[int, int] = {}  # storage address -> bytes, alive at the peak

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if t.layout == torch.strided:
            key = t.untyped_storage().data_ptr()
            if key not in self.known and key not in self.saved:
                self.saved.add(key)
                self.bytes += t.untyped_storage().nbytes()
        return t

    def _dispatch(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {_storage(t).data_ptr() for t in _tensors((args, kwargs)) if _storage(t) is not None}
        for t in _tensors(out):
            storage = _storage(t) if t.device.type == "cpu" else None
            key = storage.data_ptr() if storage is not None else 0
            if key and key not in inputs and (key not in self.live or self.live[key][0].expired()):
                self.live[key] = (StorageWeakRef(storage), storage.nbytes())
                self.saved.discard(key)  # a new storage at a freed one's address: not saved (yet)
        self._tally()
        return out

    def _tally(self) -> None:
        for key in [k for k, (ref, _) in self.live.items() if ref.expired()]:
            del self.live[key]
        heap = malloc.heap_stats()
        size, free = heap if heap is not None else (sum(n for _, n in self.live.values()), 0)
        if size > self.peak:
            self.peak, self.free, self.at_peak = size, free, {k: n for k, (_, n) in self.live.items()}

    def at_step_peak(self, held: set) -> tuple[int, int]:
        """(activations, temporaries) alive at the step's peak, in bytes, leaving out storages in `held`
        (what the step created and kept, counted with its owner: the input halo, stale blocks)."""
        saved = sum(n for k, n in self.at_peak.items() if k in self.saved and k not in held)
        return saved, sum(n for k, n in self.at_peak.items() if k not in self.saved and k not in held)

    @contextlib.contextmanager
    def measuring(self):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t), self:
            yield


# Set after the class is made: TorchDispatchMode wraps a subclass's own __torch_dispatch__ in
# torch._disable_dynamo, whose first call imports torch._dynamo (130 MB of RSS here), into the memory it measures.
StepMeter.__torch_dispatch__ = StepMeter._dispatch


def _tensors(obj) -> list:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _storage(t: torch.Tensor):
    """A dense tensor's storage; None for sparse tensors and others without one."""
    if t.layout != torch.strided:
        return None
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def known_storages(*objs) -> set:
    keys = set()
    _nbytes(objs, keys)
    return keys


def _graph_parts(graph, seen: set) -> tuple[int, int]:
    """(features, graph and operators) bytes of a LocalPart (labels and masks count with the graph)."""
    features = _nbytes(graph.x, seen)
    if graph.types is not None:
        features += _nbytes(graph.types.x, seen)
    structure = _nbytes([graph.indptr, graph.indices, graph.edge_weight, graph.in_degree, graph.in_weight,
                         graph.global_ids, graph.y, graph.train_mask, graph.val_mask, graph.test_mask,
                         graph.self_loop, graph.edge_attr, graph._ops, graph._edges], seen)
    if graph.types is not None:
        structure += _nbytes([graph.types.node_type, graph.types.edge_type, graph.types.rel_in_degree,
                              graph.types.index, graph.types.views], seen)
    return features, structure


def _halo_bytes(exchange, seen: set) -> int:
    """What the exchange keeps between steps (its buffers in flight are the step's temporaries)."""
    if exchange is None:
        return 0
    return _nbytes(exchange.tensors(), seen)


def report(graph, model: torch.nn.Module, opt: torch.optim.Optimizer, step: StepMeter, baseline: int) -> dict:
    """This rank's figures in MB (see the module docstring)."""
    seen: set = set()  # each storage counted once, in the first category that holds it
    features, structure = _graph_parts(graph, seen)
    halo = _halo_bytes(graph.exchange, seen)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = _nbytes(list(opt.state.values()), seen)
    _nbytes([p.grad for p in model.parameters()], seen)
    activations, temporaries = step.at_step_peak(seen)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    uss = psutil.Process().memory_full_info().uss
    figures = {"features": features, "graph and operators": structure, "halo buffers": halo,
               "activations": activations, "step temporaries": temporaries, "parameters and gradients": 2 * params,
               "optimizer state": state, "numba kernels": kernels.numba_bytes(),
               "allocator's free heap": max(0, step.free - malloc.trimmed_bytes()), "runtime": baseline}
    figures["sum"] = sum(figures.values())
    figures.update({"peak RSS": peak, "not attributed": peak - figures["sum"], "USS now": uss})
    return {k: v / MB for k, v in figures.items()}


def print_reports(mine: dict, ctx) -> None:
    """Rank 0 prints one row per rank."""
    rows = [None] * ctx.world_size
    if ctx.world_size > 1:
        dist.all_gather_object(rows, mine)
    else:
        rows = [mine]
    if not ctx.is_main:
        return
    keys = list(mine)
    out = ["memory per rank after the first epoch, MB (gnn_dist/train/memory.py says what each counts)",
           "rank " + " ".join(f"{k:>{max(len(k), 9)}}" for k in keys)]
    for r, row in enumerate(rows):
        out.append(f"{r:>4} " + " ".join(f"{row[k]:>{max(len(k), 9)}.1f}" for k in keys))
    sys.stderr.write("\n".join(out) + "\n")
