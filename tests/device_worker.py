"""Run under mpiexec by tests/test_gpu_ranks.py: typed and dynamic models on the device this launch places ranks on.

Usage: mpiexec -n P python tests/device_worker.py OUT DEVICE TYPED_PART DYNAMIC_PART WINDOW
DEVICE cuda: the launcher's own choice (ranks sharing one GPU: host-staged); cpu: gloo on the CPU.
Writes OUT/<model>-rank<R>.npz as CPU arrays: R-GCN (row exchange and relation aggregates first) and
HeteroConv step-0 logits of this rank's inner rows and summed gradients; GCRN and EvolveGCN predictions
of every snapshot and the first window's summed gradients.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.typed import load_typed_partition
from gnn_dist.nn.dynamic import DYNAMIC_MODELS
from gnn_dist.nn.typed import TypedGNN
from gnn_dist.runtime.launch import init
from gnn_dist.train.node import Trainer
from partition.store import read_meta
from tests.dist_worker import step0
from tests.dynamic_worker import run


def save(path: Path, ids, out: torch.Tensor, grads: list[torch.Tensor]) -> None:
    np.savez(path, global_ids=ids, out=out.cpu().numpy(), **{f"grad_{i}": g.cpu().numpy() for i, g in enumerate(grads)})


def main() -> None:
    out_dir, device, typed_dir, dyn_dir, window = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    meta = read_meta(typed_dir)
    ctx = init(backend="gloo" if device == "cpu" else None, expected_world=meta["num_parts"])
    if ctx.device.type != device:
        raise SystemExit(f"placed on {ctx.device}, not {device}")
    for name, kind, relagg in (("rgcn", "rgcn", False), ("rgcn-relagg", "rgcn", True), ("hsage", "hsage", False)):
        graph = load_typed_partition(typed_dir, ctx, relagg=relagg)
        torch.manual_seed(0)
        model = TypedGNN(kind, graph.types.feature_dims, 8, graph.num_classes, meta["edge_types"], num_bases=2)
        trainer = Trainer(model, graph, ctx, lr=0.01, weight_decay=0.0, progress=False)
        logits, grads = step0(model, graph, trainer)
        save(out_dir / f"{name}-rank{ctx.rank}.npz", graph.global_ids[: graph.num_inner], logits, grads)
    for kind in DYNAMIC_MODELS:
        seq, preds, grads, _ = run(dyn_dir, ctx, kind, window, 0)
        save(out_dir / f"{kind}-rank{ctx.rank}.npz", seq.global_ids[: seq.num_inner], preds, grads)
    ctx.close()


if __name__ == "__main__":
    main()
