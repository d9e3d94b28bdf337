"""Link prediction: node embeddings from any gnn-dist model, dot-product scores, negatives sampled per part.

Training positives are each rank's own edges (destination inner, source
inner or halo). The model's output rows travel once more through the halo
exchange (with autograd), so both ends of every local edge have an
embedding. Negatives keep the positive's destination and take a random
source among the part's rows, so sampling needs no communication. Held-out
pairs (`gnn-dist partition --link-split`) are scored on the rank that owns
the destination, after fetching the source embeddings from their owners
with one all-to-all; AUC is computed over all ranks' scores.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dropout import input_dropout_key
from gnn_dist.runtime import transport
from gnn_dist.runtime.collectives import count_sum
from gnn_dist.runtime.halo_fetch import fetch_halo
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train.loop import Loop
from partition.book import PartitionBook
from partition.errors import UsageError
from partition.store import LINK_FILE, read_root_file


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    scores = np.concatenate([pos, neg])
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(scores.shape[0])
    ranks[order] = np.arange(1, scores.shape[0] + 1)
    for v in np.unique(scores[order][np.r_[False, np.diff(scores[order]) == 0]]):  # average tied ranks
        ranks[scores == v] = ranks[scores == v].mean()
    n_pos, n_neg = pos.shape[0], neg.shape[0]
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / max(n_pos * n_neg, 1))


class LinkTask:
    monitor = "val_auc"

    def __init__(self, model: torch.nn.Module, graph: LocalGraph, ctx: DistContext, partition: str | Path):
        self.model, self.graph, self.ctx = model, graph, ctx
        self.book = graph.book if graph.book is not None else PartitionBook(partition)
        if LINK_FILE not in self.book.meta["sha256"]:
            raise UsageError(f"{partition} has no held-out edges: partition it with --link-split VAL,TEST")
        self.held = read_root_file(partition, LINK_FILE, self.book.meta, self.book.verify)
        rows = np.repeat(np.arange(graph.num_inner), np.diff(graph.indptr))
        self.pos_dst = torch.from_numpy(rows).to(ctx.device)
        self.pos_src = torch.from_numpy(graph.indices).to(ctx.device)
        self.num_pos = count_sum(rows.shape[0], ctx)

    def _embed_all(self) -> torch.Tensor:
        """Embeddings of inner and halo rows (halo rows fetched with autograd)."""
        g = self.graph
        h = self.model(g.x, g)
        if g.exchange is None:
            return h
        channel = g.exchange.channel(self, self.model.training and torch.is_grad_enabled())
        return torch.cat([h, fetch_halo(h, g.exchange, channel)])

    def train_epoch(self, loop: Loop, epoch: int) -> float:
        with input_dropout_key(loop.begin_epoch(epoch)):
            hs = self._embed_all()
        gen = torch.Generator().manual_seed(loop.seed * 7919 + epoch * 131 + self.ctx.rank)
        neg_src = torch.randint(0, hs.shape[0], (self.pos_src.shape[0],), generator=gen).to(hs.device)
        h_dst = hs[self.pos_dst]
        pos = (hs[self.pos_src] * h_dst).sum(-1)
        neg = (hs[neg_src] * h_dst).sum(-1)
        loss_sum = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum") + \
            F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")
        return loop.step(loss_sum, 2 * self.num_pos) / (2 * self.num_pos)

    def epoch_record(self) -> dict:
        return {}

    def finish(self) -> None:
        if self.graph.exchange is not None:
            self.graph.exchange.drain()

    def exchanges(self) -> list:
        return [self.graph.exchange] if self.graph.exchange is not None else []

    @torch.no_grad()
    def _fetch(self, h: torch.Tensor, gids: np.ndarray) -> torch.Tensor:
        """Embeddings of arbitrary global ids: ask each owner for its rows (one all-to-all each way)."""
        parts, local = self.book.to_local(gids)
        p = self.ctx.world_size
        dev = h.device  # NCCL moves device buffers only
        if p == 1:
            return h[torch.from_numpy(local).to(dev)]
        order = np.argsort(parts, kind="stable")
        counts = torch.from_numpy(np.bincount(parts, minlength=p).astype(np.int64)).to(dev)
        theirs = torch.empty_like(counts)
        transport.all_to_all(theirs, counts, group=self.ctx.halo_group)
        counts_l, theirs_l = counts.tolist(), theirs.tolist()
        asked = torch.empty(sum(theirs_l), dtype=torch.int64, device=dev)
        transport.all_to_all(asked, torch.from_numpy(local[order]).to(dev), theirs_l, counts_l,
                               group=self.ctx.halo_group)
        reply = torch.empty(len(gids), h.shape[1], dtype=h.dtype, device=dev)
        transport.all_to_all(reply, h[asked].contiguous(), counts_l, theirs_l, group=self.ctx.halo_group)
        out = torch.empty_like(reply)
        out[torch.from_numpy(order).to(dev)] = reply
        return out

    @torch.no_grad()
    def evaluate(self) -> dict:
        self.model.eval()  # exact messages (no autograd, eval mode)
        g = self.graph
        h = self.model(g.x, g)
        mine = set(g.global_ids[: g.num_inner].tolist())
        local_of = {v: i for i, v in enumerate(g.global_ids[: g.num_inner].tolist())}
        res = {}
        for split in ("val", "test"):
            scores = []
            for kind in ("", "neg_"):
                src, dst = self.held[f"{split}_{kind}src"], self.held[f"{split}_{kind}dst"]
                sel = np.array([d in mine for d in dst.tolist()], dtype=bool)
                hs = self._fetch(h, src[sel])  # every rank joins, even with nothing to ask
                hd = h[torch.tensor([local_of[d] for d in dst[sel].tolist()], dtype=torch.int64, device=h.device)]
                scores.append((hs * hd).sum(-1).cpu().numpy())
            gathered = [None] * self.ctx.world_size
            if self.ctx.world_size > 1:
                dist.all_gather_object(gathered, scores)
            else:
                gathered = [scores]
            res[f"{split}_auc"] = auc(np.concatenate([s[0] for s in gathered]), np.concatenate([s[1] for s in gathered]))
        return res


class LinkTrainer(Loop):
    """Link prediction: `LinkTrainer(model, part, ctx, partition_dir).fit(epochs)`; validation AUC is "better"."""

    def __init__(self, model: torch.nn.Module, graph: LocalGraph, ctx: DistContext, partition: str | Path,
                 *, weight_decay: float = 0.0, **options):
        super().__init__(model, LinkTask(model.to(ctx.device), graph, ctx, partition), ctx,
                         weight_decay=weight_decay, **options)
        self.graph = graph
