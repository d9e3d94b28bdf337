"""Node classification on one graph: cross-entropy over the training nodes, accuracy on train, val and test.

Multi-label targets (y of shape (N, C), 0/1: Yelp, AmazonProducts) train with binary cross-entropy, the
mean over every (training node, label) as PyG's examples take it, and report micro-F1 (a label is
predicted where its logit is positive), the metric those data sets' users report; or, with
`metric="rocauc"` (ogbn-proteins), the mean per-task ROC-AUC of OGB's evaluator.
"""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.dropout import input_dropout_key
from gnn_dist.nn.norm import per_rank_batch_norms
from gnn_dist.runtime.collectives import all_concat, all_sum, count_sum
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train.loop import Loop
from gnn_dist.train.metrics import roc_auc
from partition.errors import DataError


class NodeTask:
    def __init__(self, model: torch.nn.Module, graph: LocalGraph, ctx: DistContext, metric: str | None = None):
        self.model, self.graph, self.ctx = model, graph, ctx
        self.multilabel = graph.y.dim() == 2
        if metric not in (None, "rocauc") or (metric == "rocauc" and not self.multilabel):
            raise DataError(f"metric '{metric}' is not one gnn-dist computes (rocauc needs multi-label targets)")
        self.metric = metric or ("f1" if self.multilabel else "acc")
        self.monitor = f"val_{self.metric}"
        self.num_train = count_sum(int(graph.train_mask.sum()), ctx)
        if self.num_train == 0:
            raise DataError("no training nodes in the partition (train mask empty on every rank)")
        per_rank = per_rank_batch_norms(model)
        if per_rank and ctx.world_size > 1 and ctx.is_main:
            sys.stderr.write(f"[gnn-dist] warning: {', '.join(per_rank)} normalise each rank's rows apart (torch "
                             f"BatchNorm); gnn_dist.nn.BatchNorm uses every rank's rows, as one process would\n")

    def train_epoch(self, loop: Loop, epoch: int) -> float:
        g = self.graph
        with input_dropout_key(loop.begin_epoch(epoch)):
            out = self.model(g.x, g)
        if self.multilabel:  # the mean over (node, label) pairs: count every label of every training node
            count = self.num_train * g.y.shape[1]
            loss_sum = F.binary_cross_entropy_with_logits(out[g.train_mask], g.y[g.train_mask], reduction="sum")
            return loop.step(loss_sum, count) / count
        loss_sum = F.cross_entropy(out[g.train_mask], g.y[g.train_mask], reduction="sum")
        return loop.step(loss_sum, self.num_train) / self.num_train

    @torch.no_grad()
    def evaluate(self) -> dict:
        g = self.graph
        self.model.eval()  # no autograd, eval mode: every exchange is exact and leaves training state alone
        out = self.model(g.x, g)
        if self.metric == "rocauc":
            return {f"{name}_rocauc": roc_auc(all_concat(g.y[m], self.ctx).numpy(), all_concat(out[m], self.ctx).numpy())
                    for name, m in (("train", g.train_mask), ("val", g.val_mask), ("test", g.test_mask))}
        if self.multilabel:
            return self._micro_f1(out > 0)
        pred = out.argmax(dim=1)
        counts = []
        for m in (g.train_mask, g.val_mask, g.test_mask):
            counts += [float((pred[m] == g.y[m]).sum()), float(m.sum())]
        c = all_sum(torch.tensor(counts, dtype=torch.float64), self.ctx).tolist()
        return {f"{name}_acc": c[2 * i] / max(c[2 * i + 1], 1) for i, name in enumerate(("train", "val", "test"))}

    def _micro_f1(self, pred: torch.Tensor) -> dict:
        """Micro-F1 per split from true positives, false positives and false negatives summed over ranks."""
        g, counts = self.graph, []
        truth = g.y > 0.5
        for m in (g.train_mask, g.val_mask, g.test_mask):
            p, t = pred[m], truth[m]
            counts += [float((p & t).sum()), float((p & ~t).sum()), float((~p & t).sum())]
        c = all_sum(torch.tensor(counts, dtype=torch.float64), self.ctx).tolist()
        return {f"{name}_f1": 2 * c[3 * i] / max(2 * c[3 * i] + c[3 * i + 1] + c[3 * i + 2], 1)
                for i, name in enumerate(("train", "val", "test"))}

    def epoch_record(self) -> dict:
        ex = self.graph.exchange
        if ex is None:
            return {}
        halo = ex.epoch_metrics()
        sent = sum(sum(c["bytes"]) for k, c in halo.items() if not k.endswith("eval"))
        return {"halo": halo, "halo_bytes_all_ranks": count_sum(sent, self.ctx)}

    def finish(self) -> None:
        if self.graph.exchange is not None:
            self.graph.exchange.drain()

    def exchanges(self) -> list:
        return [self.graph.exchange] if self.graph.exchange is not None else []


class Trainer(Loop):
    """Full-graph node classification: `Trainer(model, part, ctx).fit(epochs)` (options: see `Loop`)."""

    def __init__(self, model: torch.nn.Module, graph: LocalGraph, ctx: DistContext, metric: str | None = None,
                 **options):
        task = NodeTask(model.to(ctx.device), graph, ctx, metric)
        super().__init__(model, task, ctx, **options)
        self.graph, self.num_train = graph, task.num_train
