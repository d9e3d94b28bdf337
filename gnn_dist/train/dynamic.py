"""Training over a snapshot sequence: windows of W snapshots, truncated backpropagation through time.

One epoch walks the training snapshots in order, G at a time
(`gnn_dist.graph.snapshot_group`: one exchange per group for the convolutions
that do not read the last state; groups never straddle a window). Within a window the model's
state (evolved weights or node states) carries gradients; at the end of a
window the loss (mean over the window's snapshots and all nodes of the graph)
is backpropagated, gradients are summed over ranks in one all-reduce, the
optimizer steps and the state is detached. Evaluation replays the whole
sequence from the initial state with exact messages, in groups of G (any
alignment: nothing steps in between), and scores the test
snapshots, next to the "last value" baseline (predict y_t = x_t[:, -1],
meaningful where features are lagged targets).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gnn_dist.graph.dynamic import SnapshotSequence
from gnn_dist.graph.snapshot_group import auto_group_size, spans
from gnn_dist.nn.dynamic import detach_state
from gnn_dist.runtime.collectives import all_sum, count_sum
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train.loop import Loop
from partition.errors import UsageError

RESUME_WITH_POLICY = ("--resume is refused on dynamic graphs under adaptive bit-widths, staleness or skipping: their "
                      "exchanges (one per snapshot group) are not checkpointed, so a resumed run would differ from "
                      "the uninterrupted one (codecs alone resume exactly)")

class DynamicTask:
    monitor = None  # train and test periods only: no validation snapshots to judge "best" by

    def __init__(self, model: torch.nn.Module, seq: SnapshotSequence, ctx: DistContext, window: int, group: int = 0):
        if not 1 <= window <= seq.num_train:
            raise UsageError(f"--window {window} is longer than the {seq.num_train} training snapshots "
                             f"(of {seq.num_snapshots}); choose 1..{seq.num_train}")
        if group < 0:
            raise UsageError(f"--snapshot-group must be >= 0 (0: automatic), got {group}")
        self.model, self.seq, self.ctx, self.window = model, seq, ctx, window
        seq.loop_ends_steps = True  # the loop ends every step: no exchange of the sequence guesses
        self.num_nodes = count_sum(seq.num_inner, ctx)
        # the same size on every rank (ranks must group alike): from the largest part's rows
        self.group = group or auto_group_size(count_sum(seq.num_local, ctx, op=dist.ReduceOp.MAX))
        # training groups never straddle a window (the optimiser steps between windows); evaluation's may
        self.train_spans = [sp for w0 in range(0, seq.num_train, window)
                            for sp in spans(w0, min(w0 + window, seq.num_train), min(self.group, window))]
        self.eval_spans = spans(0, seq.num_snapshots, self.group)
        self._plan0 = 0.0

    def _forward(self, t0: int, t1: int, group, state):
        return self.model.forward_group(self.seq.x[t0:t1], group, state)

    def _loss_sum(self, out: torch.Tensor, t0: int, t1: int) -> torch.Tensor:
        """Loss summed over snapshots t0..t1-1 and their rows; out is [G, n, C]."""
        y = self.seq.y[t0:t1]
        if self.seq.task == "regression":
            return F.mse_loss(out.squeeze(-1), y, reduction="sum")
        return F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="sum")

    def train_epoch(self, loop: Loop, epoch: int) -> float:
        self._plan0 = self.seq.plan_seconds
        loop.begin_epoch(epoch)
        state = self.model.init_state(self.seq.num_inner)
        total, window_loss = 0.0, 0
        for t0, t1, group in self.seq.groups(self.train_spans):
            out, state = self._forward(t0, t1, group, state)
            window_loss = window_loss + self._loss_sum(out, t0, t1)
            if t1 % self.window == 0 or t1 == self.seq.num_train:  # the window ends with this group
                in_window = t1 - (t0 // self.window) * self.window
                total += loop.step(window_loss, self.num_nodes * in_window) / self.num_nodes
                state, window_loss = detach_state(state), 0
        return total / self.seq.num_train

    def epoch_record(self) -> dict:
        """Plan time; bytes sent and all-to-alls in training (this rank's; bytes also over all ranks, as static
        runs log them); all-to-alls per snapshot step, training and evaluation."""
        traffic = self.seq.take_traffic()
        sent = traffic["halo_bytes"]
        return {"plan_time": self.seq.plan_seconds - self._plan0, "halo_bytes": sent,
                "halo_bytes_all_ranks": count_sum(sent, self.ctx),
                "exchanges_per_step": traffic["exchanges"] / self.seq.num_train,
                "eval_exchanges": traffic["eval_exchanges"]}

    def finish(self) -> None:
        for ex in self.seq.exchanges(every=True):  # stale blocks still in flight: no group closes under one
            ex.drain()

    def exchanges(self) -> list:
        return self.seq.exchanges()

    @torch.no_grad()
    def _replay(self):
        """(t0, t1, outputs [G, n, C]) over the whole sequence from the initial state, exact messages."""
        self.model.eval()
        state = self.model.init_state(self.seq.num_inner)
        for t0, t1, group in self.seq.groups(self.eval_spans):
            out, state = self._forward(t0, t1, group, state)
            yield t0, t1, out

    def evaluate(self) -> dict:
        """Replay all snapshots from the initial state with exact messages; score train and test periods."""
        sums = torch.zeros(6, dtype=torch.float64)  # loss/score train, test; last-value train, test; rows train, test
        regression = self.seq.task == "regression"
        for t0, t1, out in self._replay():
            y = self.seq.y[t0:t1]
            test = torch.arange(t0, t1, device=y.device) >= self.seq.num_train
            if regression:
                per = ((out.squeeze(-1) - y) ** 2).sum(1)
                last = ((self.seq.x[t0:t1, :, -1] - y) ** 2).sum(1)
            else:
                per, last = (out.argmax(dim=-1) == y).sum(1).to(torch.float32), torch.zeros(t1 - t0, device=y.device)
            for k, rows in ((0, ~test), (1, test)):
                sums[k] += float(per[rows].double().sum())
                sums[2 + k] += float(last[rows].double().sum())
                sums[4 + k] += int(rows.sum()) * y.shape[1]
        s = all_sum(sums, self.ctx).tolist()
        metric = "mse" if regression else "acc"
        rec = {f"train_{metric}": s[0] / max(s[4], 1), f"test_{metric}": s[1] / max(s[5], 1)}
        if regression:
            rec.update(train_last_value_mse=s[2] / max(s[4], 1), test_last_value_mse=s[3] / max(s[5], 1))
        return rec

    def predict(self) -> torch.Tensor:
        """Outputs of every snapshot, [T, inner rows (union order), out], exact messages."""
        return torch.cat([out for _, _, out in self._replay()])


class DynamicTrainer(Loop):
    """Training over a snapshot sequence: `DynamicTrainer(model, seq, ctx, window=W).fit(epochs)`.

    `snapshot_group` G: snapshots per block-diagonal group (0: chosen from the part's size).
    """

    def __init__(self, model: torch.nn.Module, seq: SnapshotSequence, ctx: DistContext, *, window: int,
                 snapshot_group: int = 0, weight_decay: float = 0.0, **options):
        task = DynamicTask(model.to(ctx.device), seq, ctx, window, snapshot_group)
        super().__init__(model, task, ctx, weight_decay=weight_decay, **options)
        self.seq, self.num_nodes = seq, task.num_nodes

    def fit(self, epochs: int, resume: bool = False) -> dict:
        if resume and self.seq.stateful:
            raise UsageError(RESUME_WITH_POLICY)
        return super().fit(epochs, resume)

    def predict(self) -> torch.Tensor:
        return self.task.predict()
