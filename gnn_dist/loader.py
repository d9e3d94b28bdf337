"""load_partition: this rank's part of a partition directory as a LocalGraph with its exchange."""
from __future__ import annotations

from pathlib import Path

import torch

from gnn_dist.exchange import HaloExchange
from gnn_dist.graph import LocalGraph
from gnn_dist.launch import DistContext, LaunchError
from partition.store import read_meta, read_part


def load_partition(path: str | Path, ctx: DistContext, overlap: bool = True, verify: bool = True,
                   codec: str = "fp32") -> LocalGraph:
    meta = read_meta(path)
    if meta["num_parts"] != ctx.world_size:
        raise LaunchError(f"launched with {ctx.world_size} ranks but {path} has {meta['num_parts']} parts")
    plan = read_part(path, ctx.rank, meta, verify=verify)
    exchange = None
    if sum(p["halo"] for p in meta["parts"]) > 0:  # every rank decides alike: all join the collective or none
        exchange = HaloExchange(torch.from_numpy(plan.send_idx).to(ctx.device),
                                plan.send_counts.tolist(), plan.recv_counts.tolist(), ctx.halo_group, codec)
    graph = LocalGraph.from_plan(plan, meta["num_classes"], meta["num_parts"], exchange, ctx.device, overlap)
    graph.meta = meta
    return graph
