"""Training over a snapshot sequence: windows of W snapshots, truncated backpropagation through time.

One epoch walks the training snapshots in order. Within a window the model's
state (evolved weights or node states) carries gradients; at the end of a
window the loss (mean over the window's snapshots and all nodes of the graph)
is backpropagated, gradients are summed over ranks in one all-reduce, the
optimizer steps and the state is detached. Evaluation replays the whole
sequence from the initial state with exact messages and scores the test
snapshots, next to the "last value" baseline (predict y_t = x_t[:, -1],
meaningful where features are lagged targets).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from gnn_dist.graph.dynamic import SnapshotGraph, SnapshotSequence
from gnn_dist.nn.dynamic import detach_state
from gnn_dist.runtime.collectives import all_sum
from gnn_dist.runtime.launch import DistContext
from gnn_dist.train.loop import Loop
from partition.errors import UsageError


class DynamicTask:
    monitor = None  # train and test periods only: no validation snapshots to judge "best" by

    def __init__(self, model: torch.nn.Module, seq: SnapshotSequence, ctx: DistContext, window: int):
        if not 1 <= window <= seq.num_train:
            raise UsageError(f"--window {window} is longer than the {seq.num_train} training snapshots "
                             f"(of {seq.num_snapshots}); choose 1..{seq.num_train}")
        self.model, self.seq, self.ctx, self.window = model, seq, ctx, window
        self.num_nodes = int(all_sum(torch.tensor([float(seq.num_inner)]), ctx)[0])
        self._plan0 = 0.0

    # ------------------------------------------------------------- one step
    def _step(self, t: int, sg: SnapshotGraph, state):
        """Model step on snapshot t; node-wise tensors enter in the snapshot's row order and leave in union order."""
        x = self.seq.x[t].index_select(0, sg.perm)
        if self.model.node_state:
            state = state.index_select(0, sg.perm)
        out, state = self.model.step(x, sg.graph, state)
        if self.model.node_state:
            state = state.index_select(0, sg.inv)
        return out.index_select(0, sg.inv), state

    def _loss_sum(self, out: torch.Tensor, t: int) -> torch.Tensor:
        y = self.seq.y[t]
        if self.seq.task == "regression":
            return F.mse_loss(out.squeeze(-1), y, reduction="sum")
        return F.cross_entropy(out, y, reduction="sum")

    def train_epoch(self, loop: Loop, epoch: int) -> float:
        self._plan0 = self.seq.plan_seconds
        loop.begin_epoch(epoch)
        state = self.model.init_state(self.seq.num_inner)
        total, window_loss, in_window = 0.0, None, 0
        for t, sg in enumerate(self.seq):
            out, state = self._step(t, sg, state)
            loss = self._loss_sum(out, t)
            window_loss = loss if window_loss is None else window_loss + loss
            in_window += 1
            last = t + 1 == self.seq.num_train
            if in_window == self.window or last:
                total += loop.step(window_loss, self.num_nodes * in_window) / self.num_nodes
                state = detach_state(state)
                window_loss, in_window = None, 0
            if last:
                break
        return total / self.seq.num_train

    def epoch_record(self) -> dict:
        """Plan time, and bytes sent in training: this rank's and, as static runs log them, all ranks'."""
        sent = self.seq.take_bytes()
        return {"plan_time": self.seq.plan_seconds - self._plan0, "halo_bytes": sent,
                "halo_bytes_all_ranks": int(all_sum(torch.tensor([float(sent)]), self.ctx)[0])}

    def finish(self) -> None:
        pass

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Replay all snapshots from the initial state with exact messages; score train and test periods."""
        self.model.eval()
        state = self.model.init_state(self.seq.num_inner)
        sums = torch.zeros(6, dtype=torch.float64)  # loss/score train, test; last-value train, test
        for t, sg in enumerate(self.seq):
            out, state = self._step(t, sg, state)
            k = 0 if t < self.seq.num_train else 1
            y = self.seq.y[t]
            if self.seq.task == "regression":
                sums[k] += float(F.mse_loss(out.squeeze(-1), y, reduction="sum"))
                sums[2 + k] += float(F.mse_loss(self.seq.x[t][:, -1], y, reduction="sum"))
            else:
                sums[k] += float((out.argmax(dim=1) == y).sum())
            sums[4 + k] += y.shape[0]
        s = all_sum(sums, self.ctx).tolist()
        metric = "mse" if self.seq.task == "regression" else "acc"
        rec = {f"train_{metric}": s[0] / max(s[4], 1), f"test_{metric}": s[1] / max(s[5], 1)}
        if self.seq.task == "regression":
            rec.update(train_last_value_mse=s[2] / max(s[4], 1), test_last_value_mse=s[3] / max(s[5], 1))
        return rec

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        """Outputs of every snapshot, [T, inner rows (union order), out], exact messages."""
        self.model.eval()
        state, outs = self.model.init_state(self.seq.num_inner), []
        for t, sg in enumerate(self.seq):
            out, state = self._step(t, sg, state)
            outs.append(out)
        return torch.stack(outs)


class DynamicTrainer(Loop):
    """Training over a snapshot sequence: `DynamicTrainer(model, seq, ctx, window=W).fit(epochs)`."""

    def __init__(self, model: torch.nn.Module, seq: SnapshotSequence, ctx: DistContext, *, window: int,
                 weight_decay: float = 0.0, **options):
        task = DynamicTask(model.to(ctx.device), seq, ctx, window)
        super().__init__(model, task, ctx, weight_decay=weight_decay, **options)
        self.seq, self.num_nodes = seq, task.num_nodes

    def predict(self) -> torch.Tensor:
        return self.task.predict()
