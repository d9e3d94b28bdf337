"""Full-graph training loop: one forward over the local part, loss on global train nodes, summed gradients.

Each rank's loss is the sum over its own train nodes divided by the global
train count, and gradients are summed across ranks, so an epoch here equals an
epoch of one process on the whole graph.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn.norm import per_rank_batch_norms
from gnn_dist.runtime.collectives import all_sum, broadcast, sum_gradients, sync_parameters
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train import checkpoint
from gnn_dist.train.optim import make_optimizer, make_schedule
from partition.errors import DataError


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """Dropout stream per (seed, epoch, rank): a resumed run replays exactly the masks it would have drawn."""
    return (seed * 1_000_003 + epoch * 7919 + rank) % (2**63 - 1)


def input_key(seed: int, epoch: int) -> int:
    """Input-dropout key per (seed, epoch), the same on every rank: ranks must drop a node's features alike."""
    return (((seed * 1_000_003 + epoch + 1) * 0x9E3779B97F4A7C15) % 2**64) >> 1


def _append_error(log: Path, rank: int, message: str) -> None:
    """One JSON line; ranks that share rank 0's filesystem can all record it (best effort, never raises)."""
    if log.parent.is_dir():
        with open(log, "a") as f:
            f.write(json.dumps({"error": message, "rank": rank}) + "\n")


class Trainer:
    def __init__(self, model: torch.nn.Module, graph: LocalGraph, ctx: DistContext, *, optimizer: str = "adam",
                 lr: float = 0.01, weight_decay: float = 5e-4, seed: int = 0, log_path: str | None = None,
                 checkpoint_dir: str | None = None, checkpoint_every: int = 0, eval_every: int = 1,
                 progress: bool = True, lr_schedule: str = "none", epochs: int = 0, lr_step: int = 50,
                 lr_gamma: float = 0.5, early_stop: int = 0, keep_best: bool = False):
        self.model, self.graph, self.ctx = model.to(ctx.device), graph, ctx
        self.seed = int(broadcast(torch.tensor([seed], dtype=torch.int64), ctx)[0])  # rank 0's seed rules
        self.opt = make_optimizer(optimizer, self.model, lr, weight_decay)
        self.sched = make_schedule(lr_schedule, self.opt, epochs, lr_step, lr_gamma)
        # early stopping and best weights: judged on validation accuracy, which every rank sees alike
        self.early_stop, self.keep_best = early_stop, keep_best or early_stop > 0
        self.best: dict = {}
        self.history: list[dict] = []  # per-epoch records (without per-channel details), for curves
        self.tensorboard = None  # a gnn_dist.train.tblog.TensorBoardLog on rank 0, if asked for
        self.log_path = Path(log_path) if log_path and ctx.is_main else None
        self.ckpt = Path(checkpoint_dir) / "checkpoint.pt" if checkpoint_dir else None
        self.checkpoint_every, self.eval_every, self.progress = checkpoint_every, eval_every, progress
        self.num_train = int(all_sum(torch.tensor([float(graph.train_mask.sum())]), ctx)[0])
        if self.num_train == 0:
            raise DataError("no training nodes in the partition (train mask empty on every rank)")
        sync_parameters(self.model, ctx)
        per_rank = per_rank_batch_norms(self.model)
        if per_rank and ctx.world_size > 1 and ctx.is_main:
            sys.stderr.write(f"[gnn-dist] warning: {', '.join(per_rank)} normalise each rank's rows apart (torch "
                             f"BatchNorm); gnn_dist.nn.BatchNorm uses every rank's rows, as one process would\n")
        if log_path:  # why the run ended, even if the launcher drops our stderr: any rank that fails first
            ctx.on_fail.append(lambda message: _append_error(Path(log_path), ctx.rank, message))

    # ------------------------------------------------------------------ steps
    def train_step(self, epoch: int) -> float:
        g = self.graph
        torch.manual_seed(epoch_seed(self.seed, epoch, self.ctx.rank))
        g.dropout_key = input_key(self.seed, epoch)
        self.model.train()
        self.opt.zero_grad(set_to_none=False)
        out = self.model(g.x, g)
        loss_sum = F.cross_entropy(out[g.train_mask], g.y[g.train_mask], reduction="sum")
        (loss_sum / self.num_train).backward()
        total = sum_gradients(self.model, self.ctx, loss_sum)
        self.opt.step()
        if self.sched is not None:
            self.sched.step()
        return float(total[0]) / self.num_train

    @torch.no_grad()
    def evaluate(self) -> dict:
        g = self.graph
        self.model.eval()  # no autograd, eval mode: every exchange is exact and leaves training state alone
        pred = self.model(g.x, g).argmax(dim=1)
        counts = []
        for m in (g.train_mask, g.val_mask, g.test_mask):
            counts += [float((pred[m] == g.y[m]).sum()), float(m.sum())]
        c = all_sum(torch.tensor(counts, dtype=torch.float64), self.ctx).tolist()
        return {f"{name}_acc": c[2 * i] / max(c[2 * i + 1], 1) for i, name in enumerate(("train", "val", "test"))}

    # ------------------------------------------------------------------- loop
    def fit(self, epochs: int, resume: bool = False) -> dict:
        start = self._resume() if resume else 0
        bar = tqdm(range(start, epochs), desc="train", unit="ep", file=sys.stderr, mininterval=1.0,
                   disable=not (self.progress and self.ctx.is_main), initial=start, total=epochs)
        record: dict = {}
        for epoch in bar:
            t0 = time.perf_counter()
            loss = self.train_step(epoch)
            dt = time.perf_counter() - t0
            record = {"epoch": epoch, "loss": loss, "epoch_time": dt}
            if epoch + 1 == epochs or (self.eval_every and (epoch + 1) % self.eval_every == 0):
                record.update(self.evaluate())
            if self.graph.exchange is not None:
                record["halo"] = self.graph.exchange.epoch_metrics()
                sent = sum(sum(c["bytes"]) for k, c in record["halo"].items() if not k.endswith("eval"))
                record["halo_bytes_all_ranks"] = int(all_sum(torch.tensor([float(sent)]), self.ctx)[0])
            record["lr"] = self.opt.param_groups[0]["lr"]
            self._log(record)
            bar.set_postfix(loss=f"{loss:.4f}", val=f"{record.get('val_acc', float('nan')):.3f}", s=f"{dt:.3f}")
            if self.ckpt and self.checkpoint_every and (epoch + 1) % self.checkpoint_every == 0:
                self.save_checkpoint(epoch)
            if self.keep_best and "val_acc" in record and self._track_best(epoch, record):
                if self.ctx.is_main and self.early_stop:
                    sys.stderr.write(f"[gnn-dist] early stop at epoch {epoch}: val acc has not improved for "
                                     f"{self.early_stop} evaluations (best {self.best['val_acc']:.4f} at epoch "
                                     f"{self.best['epoch']})\n")
                break
        bar.close()
        if self.graph.exchange is not None:
            self.graph.exchange.drain()
        if self.best:  # report (and keep) the weights of the best validation epoch
            self.model.load_state_dict(self.best["model"])
            record = dict(record, **self.evaluate(), best_epoch=self.best["epoch"])
        elif "test_acc" not in record and epochs > start:
            record.update(self.evaluate())
        return record

    def _track_best(self, epoch: int, record: dict) -> bool:
        """Remember the best weights (rank 0 also writes best.pt); True when patience has run out."""
        if not self.best or record["val_acc"] > self.best["val_acc"]:
            state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best = {"val_acc": record["val_acc"], "epoch": epoch, "model": state, "stale": 0}
            if self.ckpt and self.ctx.is_main:
                checkpoint.save_atomic({"epoch": epoch, "model": state, "val_acc": record["val_acc"]},
                                       self.ckpt.with_name("best.pt"))
            return False
        self.best["stale"] += 1
        return bool(self.early_stop) and self.best["stale"] >= self.early_stop

    def _log(self, record: dict) -> None:
        self.history.append({k: v for k, v in record.items() if k != "halo"})
        if self.tensorboard is not None:
            self.tensorboard.write(record)
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, epoch: int) -> None:
        if self.ctx.is_main:
            checkpoint.save_atomic({"epoch": epoch, "seed": self.seed, "model": self.model.state_dict(),
                                    "optimizer": self.opt.state_dict(),
                                    "schedule": self.sched.state_dict() if self.sched else None}, self.ckpt)

    def _resume(self) -> int:
        """Rank 0 reads the checkpoint and broadcasts it, so ranks need no shared filesystem."""
        state = [None]
        if self.ctx.is_main:
            state[0] = checkpoint.load(self.ckpt) if self.ckpt and self.ckpt.exists() else {}
        if self.ctx.world_size > 1:
            dist.broadcast_object_list(state, 0)
        if not state[0]:
            return 0
        self.model.load_state_dict(state[0]["model"])
        self.opt.load_state_dict(state[0]["optimizer"])
        if self.sched is not None and state[0].get("schedule"):
            self.sched.load_state_dict(state[0]["schedule"])
        return int(state[0]["epoch"]) + 1
