"""`train --memory-report`: where a rank's memory goes, by what it holds, after the first epoch.

Each category is counted from the tensors themselves, not guessed:

- features: the input rows this rank owns (typed graphs: every type's);
- graph and operators: CSR arrays, ids, degrees, masks, and the sparse operators and edge lists built
  for the layers;
- halo buffers: the exchange's plan and the state it keeps between steps (the input halo fetched once,
  stale blocks, skip references), plus the largest send and receive buffers of one exchange;
- activations: the tensors autograd saved for backward during one training step (storages counted
  once; parameters, features and graph tensors left out);
- parameters and gradients, and optimiser state;
- runtime: the process's resident memory before the partition was read (interpreter, torch,
  the process group).

Beside them, the peak resident memory of the process so far, what of it no category explains
(temporaries of forward and backward, memory the allocator keeps, numba's compiler once it has run,
the partition files as read), and the process's unique memory (USS) now.
"""
from __future__ import annotations

import contextlib
import resource
import sys

import numpy as np
import psutil
import torch
import torch.distributed as dist

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


class ActivationMeter:
    """Sums the storages autograd saves for backward while active, leaving out the ones in `known`."""

    def __init__(self, known: set):
        self.known, self.seen, self.bytes = known, set(), 0

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if t.layout == torch.strided:
            key = t.untyped_storage().data_ptr()
            if key not in self.known and key not in self.seen:
                self.seen.add(key)
                self.bytes += t.untyped_storage().nbytes()
        return t

    @contextlib.contextmanager
    def measuring(self):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield


def known_storages(*objs) -> set:
    keys = set()
    _nbytes(objs, keys)
    return keys


def _graph_parts(graph, seen: set) -> tuple[int, int]:
    """(features, graph and operators) bytes of a LocalGraph."""
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
    if exchange is None:
        return 0
    held = _nbytes([exchange.send_idx, exchange._used, exchange._sent_ref, exchange._held, exchange._static,
                    exchange._distinct], seen)
    per_call = [sum(c.bytes_per_peer) / c.calls for c in exchange.stats.values() if c.calls]  # read, not reset
    return held + 2 * int(max(per_call, default=0))  # one exchange's send and receive buffers


def report(graph, model: torch.nn.Module, opt: torch.optim.Optimizer, activations: int, baseline: int) -> dict:
    """This rank's figures in MB (see the module docstring)."""
    seen: set = set()  # each storage counted once, in the first category that holds it
    features, structure = _graph_parts(graph, seen)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = _nbytes(list(opt.state.values()), set())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    uss = psutil.Process().memory_full_info().uss
    figures = {"features": features, "graph and operators": structure, "halo buffers": _halo_bytes(graph.exchange, seen),
               "activations": activations, "parameters and gradients": 2 * params, "optimizer state": state,
               "runtime": baseline}
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
