"""Run under mpiexec by the typed-graph exactness test.

Usage: mpiexec -n P python tests/typed_worker.py OUT PART_DIR
Writes OUT/<model>-rank<R>.npz: step-0 logits of this rank's inner rows, summed gradients, and whether
overlap on and off agree bit for bit.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.typed import load_typed_partition
from gnn_dist.nn.typed import TYPED_MODELS, TypedGNN
from gnn_dist.runtime.launch import init
from gnn_dist.train.node import Trainer
from partition.store import read_meta
from tests.dist_worker import step0


def main() -> None:
    out_dir, d = Path(sys.argv[1]), sys.argv[2]
    meta = read_meta(d)
    ctx = init(expected_world=meta["num_parts"])
    for kind in TYPED_MODELS:
        res = {}
        for overlap in (True, False):
            graph = load_typed_partition(d, ctx, overlap=overlap)
            torch.manual_seed(0)
            model = TypedGNN(kind, graph.types.feature_dims, 8, graph.num_classes, meta["edge_types"], num_bases=2)
            trainer = Trainer(model, graph, ctx, lr=0.01, weight_decay=0.0, progress=False)
            res[overlap] = step0(model, graph, trainer)
        (lo, go), (ln, gn) = res[True], res[False]
        same = torch.equal(lo, ln) and all(torch.equal(a, b) for a, b in zip(go, gn))
        if kind == "rgcn":  # relation aggregates first: the same numbers, other bytes
            graph = load_typed_partition(d, ctx, relagg=True)
            torch.manual_seed(0)
            model = TypedGNN(kind, graph.types.feature_dims, 8, graph.num_classes, meta["edge_types"], num_bases=2)
            trainer = Trainer(model, graph, ctx, lr=0.01, weight_decay=0.0, progress=False)
            la, ga = step0(model, graph, trainer)
            metrics = graph.exchange.epoch_metrics() if graph.exchange else {}
            raf_bytes = sum(sum(c["bytes"]) for k, c in metrics.items() if ".raf." in k)  # only the aggregate path
            np.savez(out_dir / f"rgcn-relagg-rank{ctx.rank}.npz", logits=la.numpy(), raf_bytes=raf_bytes,
                     **{f"grad_{i}": g.numpy() for i, g in enumerate(ga)})
        np.savez(out_dir / f"{kind}-rank{ctx.rank}.npz", global_ids=graph.global_ids[: graph.num_inner],
                 logits=lo.numpy(), overlap_identical=same, **{f"grad_{i}": g.numpy() for i, g in enumerate(go)})
    ctx.close()


if __name__ == "__main__":
    main()
