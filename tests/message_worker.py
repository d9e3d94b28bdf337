"""Run under mpiexec by test_message_semantics: the default-message matrix and BatchNorm on every rank.

Usage: mpiexec -n P python tests/message_worker.py OUT WEIGHTED_DIR UNWEIGHTED_DIR
Writes OUT/<case>-rank<R>.npz: this rank's output rows (by global id) and the parameter gradients summed over
ranks, for every (aggr, norm, message) case of `tests.message_cases.CASES`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.load import load_partition
from gnn_dist.nn import BatchNorm
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.launch import init
from tests.message_cases import CASES, make_layer, readout


def main() -> None:
    out_dir, dirs = Path(sys.argv[1]), {"weighted": sys.argv[2], "unweighted": sys.argv[3]}
    with init() as ctx:
        for graph_name, d in dirs.items():
            graph = load_partition(d, ctx)
            gids = torch.from_numpy(graph.global_ids[: graph.num_inner].astype(np.int64))
            for case in CASES:
                layer = make_layer(*case, in_channels=graph.num_features)
                out = layer(graph.x, graph)
                readout(out, gids).backward()
                np.savez(out_dir / f"{graph_name}-{'-'.join(case)}-rank{ctx.rank}.npz", global_ids=gids.numpy(),
                         out=out.detach().numpy(),
                         **{f"grad_{n}": all_sum(p.grad.clone(), ctx).numpy() for n, p in layer.named_parameters()})
            # batch norm over every rank's rows: values, input gradients and running statistics
            torch.manual_seed(1)
            norm = BatchNorm(graph.num_features)
            x = graph.x.clone().requires_grad_(True)
            y = norm(x * (1 + gids.unsqueeze(1) % 3))
            readout(y, gids).backward()
            np.savez(out_dir / f"{graph_name}-batchnorm-rank{ctx.rank}.npz", global_ids=gids.numpy(),
                     out=y.detach().numpy(), grad_x=x.grad.numpy(), running_mean=norm.running_mean.numpy(),
                     running_var=norm.running_var.numpy(), grad_weight=all_sum(norm.weight.grad.clone(), ctx).numpy())


if __name__ == "__main__":
    main()
