"""load_partition: this rank's part of a partition directory as a LocalPart (graph, exchange and node data)."""
from __future__ import annotations

from pathlib import Path

import torch

from gnn_dist.graph.local import LocalGraph, LocalPart
from gnn_dist.runtime.exchange import ExchangeConfig, HaloExchange, HaloPlan
from gnn_dist.runtime.launch import DistContext, wrong_rank_count
from partition.book import PartitionBook
from partition.store import read_meta, read_part


def load_partition(path: str | Path, ctx: DistContext, overlap: bool = True, verify: bool = True,
                   exchange: ExchangeConfig | None = None) -> LocalPart:
    meta = read_meta(path)
    if meta["num_parts"] != ctx.world_size:
        raise wrong_rank_count(ctx.world_size, str(path), meta["num_parts"])
    plan = read_part(path, ctx.rank, meta, verify=verify)
    book = PartitionBook(path, meta, verify)
    book.adopt(ctx.rank, plan.global_ids, plan.num_inner)  # one id map: the book holds this part's rows
    if sum(p["halo"] for p in meta["parts"]) > 0:  # every rank decides alike: all join the collective or none
        halo = HaloExchange.connect(HaloPlan(torch.from_numpy(plan.send_idx).to(ctx.device), plan.send_counts,
                                             plan.recv_counts), ctx.halo_group, ctx.rank, exchange)
    else:
        halo = None
    graph = LocalGraph.from_plan(plan, meta["num_classes"], meta["num_parts"], halo, ctx.device, overlap)
    graph.book = book
    return graph
