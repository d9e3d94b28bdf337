"""Run under mpiexec by the exactness tests: step-0 logits/gradients and 20-epoch losses per model.

Usage: mpiexec -n P python tests/dist_worker.py OUT PART_DIR [PART_DIR ...]
Writes OUT/<dataset>-<model>-rank<R>.npz with this rank's rows.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gnn_dist.graph.load import load_partition
from gnn_dist.nn import MODELS, build_model
from gnn_dist.nn.dropout import input_dropout_key
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.exchange import ExchangeConfig
from gnn_dist.runtime.launch import init
from gnn_dist.train.node import Trainer
from partition.store import read_meta

EPOCHS = 20
KEY = 12345  # input-dropout key of the keyed-dropout check


def step0(model, graph, trainer):
    model.zero_grad()
    out = model(graph.x, graph)
    loss = F.cross_entropy(out[graph.train_mask], graph.y[graph.train_mask], reduction="sum") / trainer.num_train
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for g in grads:
        all_sum(g, trainer.ctx)
    return out.detach(), grads


def main() -> None:
    out_dir = Path(sys.argv[1])
    dirs = sys.argv[2:]
    ctx = init(expected_world=read_meta(dirs[0])["num_parts"])
    for d in dirs:
        name = Path(d).name
        for kind in MODELS:
            res = {}
            for overlap in (True, False):
                graph = load_partition(d, ctx, overlap=overlap)
                torch.manual_seed(0)
                model = build_model(kind, graph.num_features, 8, graph.num_classes, layers=2, dropout=0.0, heads=2)
                trainer = Trainer(model, graph, ctx, lr=0.01, weight_decay=5e-4, progress=False)
                logits, grads = step0(model, graph, trainer)
                losses = [trainer.train_epoch(e) for e in range(EPOCHS)]
                res[overlap] = (logits, grads, losses)
            (lo, go, lso), (ln, gn, lsn) = res[True], res[False]
            same = torch.equal(lo, ln) and all(torch.equal(a, b) for a, b in zip(go, gn)) and lso == lsn
            np.savez(out_dir / f"{name}-{kind}-rank{ctx.rank}.npz",
                     global_ids=graph.global_ids[: graph.num_inner], logits=lo.numpy(),
                     losses=np.array(lso), overlap_identical=same,
                     **{f"grad_{i}": g.numpy() for i, g in enumerate(go)})
        graph = load_partition(d, ctx)
        if graph.edge_attr is not None:  # a custom layer reading edge features, distributed unchanged
            from tests.test_layer_api import EdgeFeatureConv

            torch.manual_seed(0)
            layer = EdgeFeatureConv(graph.num_features, graph.edge_attr.shape[1])
            out = layer(graph.x, graph)
            out.pow(2).sum().backward()
            np.savez(out_dir / f"{name}-edgefeat-rank{ctx.rank}.npz", global_ids=graph.global_ids[: graph.num_inner],
                     out=out.detach().numpy(), **{f"grad_{i}": all_sum(p.grad.clone(), ctx).numpy()
                                                  for i, p in enumerate(layer.parameters())})
        # keyed input dropout, the input's halo fetched once (default) or sent every time: same rows
        for cache in (True, False):
            graph = load_partition(d, ctx, exchange=ExchangeConfig(input_cache=cache))
            torch.manual_seed(0)
            layer = build_model("gcn", graph.num_features, 8, 64, layers=1, dropout=0.5)  # 64 wide: aggregates X
            with input_dropout_key(KEY):
                out = layer(graph.x, graph)
            ex = graph.exchange  # none with one rank
            sent = {k: sum(v["bytes"]) for k, v in ex.epoch_metrics().items()} if ex is not None else {}
            np.savez(out_dir / f"{name}-inputdrop-{cache}-rank{ctx.rank}.npz",
                     global_ids=graph.global_ids[: graph.num_inner], out=out.detach().numpy(),
                     sent_L0=sent.get("fwd.L0", 0), sent_input=sent.get("fwd.input", 0))
        # compressed exchange: same model, int8 messages and gradients in training (rows of <= 8 values travel
        # as fp16; the SBM graph's 12 input features, sent every epoch here, take the int8 kernels)
        graph = load_partition(d, ctx, exchange=ExchangeConfig(codec="int8", input_cache=False))
        torch.manual_seed(0)
        model = build_model("gcn", graph.num_features, 8, graph.num_classes, layers=2, dropout=0.0)
        trainer = Trainer(model, graph, ctx, lr=0.01, weight_decay=5e-4, progress=False)
        losses = [trainer.train_epoch(e) for e in range(EPOCHS)]
        np.savez(out_dir / f"{name}-gcn-int8-rank{ctx.rank}.npz", losses=np.array(losses))
    ctx.close()


if __name__ == "__main__":
    main()
