"""Run under mpiexec by the dynamic-graph exactness test.

Usage: mpiexec -n P python tests/dynamic_worker.py OUT WINDOW EPOCHS PART_DIR [PART_DIR ...]
For each partition and model writes OUT/<dir>-<model>-rank<R>.npz: initial predictions of every
snapshot, gradients of the first window, per-epoch losses, and whether the variants (no overlap,
rebuilt plans without cache) reproduce them bit for bit; plus int4-codec losses
(int4 quantises rows of any width; int8 rows of <= 8 values travel as fp16), and
the same figures with snapshot groups of 2 (the default groups fill each window).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.dynamic import SnapshotSequence
from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dynamic import DYNAMIC_MODELS, build_dynamic_model
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.exchange import ExchangeConfig
from gnn_dist.runtime.launch import init
from gnn_dist.train.dynamic import DynamicTrainer
from partition.store import read_meta

HIDDEN = 8


def run(d: str, ctx, kind: str, window: int, epochs: int, group: int = 0, **seq_kw):
    seq = SnapshotSequence(d, ctx, **seq_kw)
    torch.manual_seed(0)
    out = 1 if seq.task == "regression" else seq.num_classes
    model = build_dynamic_model(kind, seq.num_features, HIDDEN, out, layers=2 if kind == "evolvegcn" else 1)
    trainer = DynamicTrainer(model, seq, ctx, window=window, snapshot_group=group, lr=0.01, progress=False)
    preds = trainer.predict()
    # gradients of the first window, summed over ranks, as the trainer's first step sees them
    state, loss, task = model.init_state(seq.num_inner), 0, trainer.task
    for t0, t1, g in seq.groups([span for span in task.train_spans if span[1] <= window]):
        o, state = task._forward(t0, t1, g, state)
        loss = loss + task._loss_sum(o, t0, t1)
    model.zero_grad()
    (loss / (trainer.num_nodes * window)).backward()
    grads = [all_sum(p.grad.clone(), ctx) for p in model.parameters()]
    losses = [trainer.train_epoch(e) for e in range(epochs)]
    return seq, preds, grads, losses


def main() -> None:
    out_dir, window, epochs, dirs = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    ctx = init(expected_world=read_meta(dirs[0])["num_parts"])
    for d in dirs:
        for kind in DYNAMIC_MODELS:
            seq, preds, grads, losses = run(d, ctx, kind, window, epochs)
            same = True
            for variant in ({"overlap": False}, {"mode": "rebuild", "cache": False}):
                _, p2, g2, l2 = run(d, ctx, kind, window, epochs, **variant)
                same &= torch.equal(preds, p2) and all(torch.equal(a, b) for a, b in zip(grads, g2)) and losses == l2
            _, _, _, lq = run(d, ctx, kind, window, epochs, exchange=ExchangeConfig(codec="int4"))
            _, p2, g2, l2 = run(d, ctx, kind, window, epochs, group=2)  # groups of 2 across windows of 3
            graphs = [sg.graph for sg in seq] + [g.graph for _, _, g in seq.groups([(0, 2)])]
            topology_only = all(type(g) is LocalGraph for g in graphs)  # no node data, dummy or not
            np.savez(out_dir / f"{Path(d).name}-{kind}-rank{ctx.rank}.npz",
                     global_ids=seq.global_ids[: seq.num_inner], preds=preds.numpy(), losses=np.array(losses),
                     int4_losses=np.array(lq), variants_identical=same, topology_only=topology_only,
                     g2_preds=p2.numpy(), g2_losses=np.array(l2),
                     **{f"grad_{i}": g.numpy() for i, g in enumerate(grads)},
                     **{f"g2_grad_{i}": g.numpy() for i, g in enumerate(g2)})
    ctx.close()


if __name__ == "__main__":
    main()
