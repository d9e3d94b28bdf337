"""Run under mpiexec by test_exact_evaluation: evaluations between training steps change nothing.

Usage: mpiexec -n P python tests/eval_worker.py OUT PART_DIR
Writes OUT/<policy>-<with|without>-rank<R>.npy (per-epoch losses) and OUT/int8-rank<R>.npz (repeated
hand-written evaluations under an int8 run, and the same model's output through an exact exchange).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

import gnn_dist as gd
from gnn_dist.runtime.exchange import ExchangeConfig

EPOCHS = 10
POLICIES = {"stale1": dict(staleness=1), "skip": dict(skip_threshold=0.05, refresh_every=4),
            "adaptive": dict(codec="adaptive", adaptive_every=3)}


def train(ctx, part: str, cfg: ExchangeConfig, extra_eval: bool) -> list[float]:
    graph = gd.load_partition(part, ctx, exchange=cfg)
    torch.manual_seed(0)
    model = gd.nn.build_model("gcn", graph.num_features, 16, graph.num_classes, layers=3, dropout=0.5)
    trainer = gd.Trainer(model, graph, ctx, progress=False)
    losses = []
    for epoch in range(EPOCHS):
        losses.append(trainer.train_epoch(epoch))
        if extra_eval:  # the trainer's evaluation, and a hand-written one: no_grad in train mode
            trainer.evaluate()
            model.train()
            with torch.no_grad():
                model(graph.x, graph)
    return losses


def main() -> None:
    out, part = Path(sys.argv[1]), sys.argv[2]
    with gd.init() as ctx:
        links = {(s, d): (1e-9, 1e-5) for s in range(ctx.world_size) for d in range(ctx.world_size) if s != d}
        for name, policy in POLICIES.items():
            for extra in (False, True):
                cfg = ExchangeConfig(links=links, **policy)
                np.save(out / f"{name}-{'with' if extra else 'without'}-rank{ctx.rank}.npy",
                        np.array(train(ctx, part, cfg, extra)))
        # a user's own loop under int8: repeated evaluations agree bit for bit, and with an exact exchange
        graph = gd.load_partition(part, ctx, exchange=ExchangeConfig(codec="int8"))
        torch.manual_seed(0)
        model = gd.nn.build_model("gcn", graph.num_features, 16, graph.num_classes, layers=3, dropout=0.5)
        trainer = gd.Trainer(model, graph, ctx, progress=False)
        for epoch in range(5):
            trainer.train_epoch(epoch)
        model.eval()
        with torch.no_grad():
            evals = [model(graph.x, graph) for _ in range(3)]
            exact_graph = gd.load_partition(part, ctx)
            exact = model(exact_graph.x, exact_graph)
        np.savez(out / f"int8-rank{ctx.rank}.npz", evals=torch.stack(evals).numpy(), exact=exact.numpy())
        # a torch BatchNorm1d normalises per rank: the trainer says so, once
        gd.Trainer(torch.nn.Sequential(torch.nn.BatchNorm1d(4)), graph, ctx, progress=False)


if __name__ == "__main__":
    main()
