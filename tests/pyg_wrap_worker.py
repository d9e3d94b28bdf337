"""Run under mpiexec by tests/test_pyg_wrap.py: every PyG layer and model of tests/pyg_wrap_cases.py, wrapped by
gd.nn.Distributed, on this rank's part; then GAT's attention weights, PyG's wrapped and gnn-dist's own.

Usage: mpiexec -n P python tests/pyg_wrap_worker.py OUT PARTITION ONE_WAY_PARTITION
Writes OUT/<case>-rank<R>.npz: global ids and output of this rank's rows, the input gradient of those rows (layers),
and parameter gradients summed over ranks; OUT/attention-<kind>-rank<R>.npz: this rank's edges in global ids and
their weights; OUT/one-way-<case>-rank<R>.npz: ONE_WAY_CASES on the one-way partition (a rank without halo).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import gnn_dist as gd
from gnn_dist.graph.load import load_partition
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.launch import init
from tests.pyg_wrap_cases import F_IN, ONE_WAY_CASES, OUT, build, cases, edge_tensors, pna_histogram, readout


def run_case(name: str, graph, ctx, out_dir: Path, prefix: str = "") -> None:
    gids = torch.from_numpy(graph.global_ids[: graph.num_inner].astype(np.int64))
    kind = cases()[name][2]
    module = build(name) if kind == "port" else gd.nn.Distributed(build(name))
    x = graph.x.clone().requires_grad_(True) if kind != "model" else graph.x
    out = module(x, graph, **edge_tensors(name, graph.edge_features(), torch.from_numpy(graph.edge_weight)))
    readout(out, gids).backward()
    extra = {"grad_x": x.grad.numpy()} if x.requires_grad else {}
    np.savez(out_dir / f"{prefix}{name}-rank{ctx.rank}.npz", global_ids=gids.numpy(), out=out.detach().numpy(), **extra,
             **{f"grad_{k}": all_sum(p.grad.clone(), ctx).numpy() for k, p in module.named_parameters()
                if p.grad is not None})


def attention(graph, ctx, out_dir: Path) -> None:
    """Attention weights per edge, in eval mode: PyG's GATConv wrapped, and gd.nn.GATConv with its weights."""
    import torch_geometric.nn as pyg

    torch.manual_seed(0)
    conv = pyg.GATConv(F_IN, OUT, heads=2)
    own = gd.nn.GATConv(F_IN, OUT, heads=2)
    own.load_state_dict(conv.state_dict())
    for kind, layer in (("wrapped", gd.nn.Distributed(conv)), ("own", own)):
        layer.eval()
        _, (edges, alpha) = layer(graph.x, graph, return_attention_weights=True)
        glob = graph.global_ids[edges.numpy()]
        np.savez(out_dir / f"attention-{kind}-rank{ctx.rank}.npz", src=glob[0], dst=glob[1], alpha=alpha.detach().numpy())


LOSSY = {"int8": {"codec": "int8"}, "staleness1": {"staleness": 1}}


def lossy(part: str, ctx, out_dir: Path) -> None:
    """Every layer case, 4 SGD steps under each lossy setting and exact fp32 (a fresh part each: an exchange is set
    before its first training exchange): OUT/lossy-<setting>.json, the losses of each case (rank 0)."""
    from gnn_dist.runtime.exchange import ExchangeConfig

    for setting, kw in {"fp32": {}, **LOSSY}.items():
        graph = load_partition(part, ctx, exchange=ExchangeConfig(**kw))
        graph.exchange.loop_ends_steps()
        gids = torch.from_numpy(graph.global_ids[: graph.num_inner].astype(np.int64))
        losses = {}
        for name, (_, _, kind) in cases().items():
            if kind != "layer":
                continue
            module = gd.nn.Distributed(build(name))
            opt = torch.optim.SGD(module.parameters(), lr=0.05) if list(module.parameters()) else None
            x = torch.nn.Parameter(graph.x.clone())
            opt_x = torch.optim.SGD([x], lr=0.05)
            losses[name] = []
            for _ in range(4):
                out = module(x, graph, **edge_tensors(name, graph.edge_features(), torch.from_numpy(graph.edge_weight)))
                loss = all_sum(readout(out, gids).detach().reshape(1), ctx)
                readout(out, gids).backward()
                for o in (opt, opt_x):
                    if o is not None:
                        o.step()
                        o.zero_grad()
                graph.exchange.end_step()
                losses[name].append(float(loss))
        if ctx.rank == 0:
            (out_dir / f"lossy-{setting}.json").write_text(json.dumps(losses))


def main() -> None:
    out_dir, part, one_way = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    with init() as ctx:
        graph = load_partition(part, ctx)
        assert torch.equal(gd.nn.degree_histogram(graph), pna_histogram()), "degree_histogram is not the global one"
        for name in cases():
            run_case(name, graph, ctx, out_dir)
        attention(graph, ctx, out_dir)
        if ctx.world_size > 1:
            lossy(part, ctx, out_dir)
        graph = load_partition(one_way, ctx)
        for name in ONE_WAY_CASES:
            run_case(name, graph, ctx, out_dir, prefix="one-way-")


if __name__ == "__main__":
    main()
