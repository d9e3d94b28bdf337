"""Run under mpiexec by the dynamic-graph exactness test.

Usage: mpiexec -n P python tests/dynamic_worker.py OUT WINDOW EPOCHS PART_DIR [PART_DIR ...]
For each partition and model writes OUT/<dir>-<model>-rank<R>.npz: initial predictions of every
snapshot, gradients of the first window, per-epoch losses, and whether the variants (no overlap,
rebuilt plans without cache) reproduce them bit for bit; plus int4-codec losses
(int4 quantises rows of any width; int8 rows of <= 8 values travel as fp16).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.dynamic import SnapshotSequence
from gnn_dist.nn.dynamic import DYNAMIC_MODELS, build_dynamic_model
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.exchange import ExchangeConfig
from gnn_dist.runtime.launch import init
from gnn_dist.train.dynamic import DynamicTrainer
from partition.store import read_meta

HIDDEN = 8


def run(d: str, ctx, kind: str, window: int, epochs: int, **seq_kw):
    seq = SnapshotSequence(d, ctx, **seq_kw)
    torch.manual_seed(0)
    out = 1 if seq.task == "regression" else seq.num_classes
    model = build_dynamic_model(kind, seq.num_features, HIDDEN, out, layers=2 if kind == "evolvegcn" else 1)
    trainer = DynamicTrainer(model, seq, ctx, window=window, lr=0.01, progress=False)
    preds = trainer.predict()
    # gradients of the first window, summed over ranks, as the trainer's first step sees them
    state, loss = model.init_state(seq.num_inner), 0
    for t, sg in zip(range(window), seq):
        o, state = trainer.task._step(t, sg, state)
        loss = loss + trainer.task._loss_sum(o, t)
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
            np.savez(out_dir / f"{Path(d).name}-{kind}-rank{ctx.rank}.npz",
                     global_ids=seq.global_ids[: seq.num_inner], preds=preds.numpy(), losses=np.array(losses),
                     int4_losses=np.array(lq), variants_identical=same,
                     **{f"grad_{i}": g.numpy() for i, g in enumerate(grads)})
    ctx.close()


if __name__ == "__main__":
    main()
