"""The single-process PyG run that distributed dynamic-GNN results are checked against.

Same model (PyG's GCNConv doing every graph step, `to_pyg_dynamic`), same
windows and loss, whole graph in one process: used by the exactness tests and
by `scripts/bench_dynamic.py`.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gnn_dist.nn.dynamic import PyGSnapshot, detach_state
from partition.dynamic import Snapshots


def pyg_snapshots(seq: Snapshots, dtype=torch.float32, device="cpu") -> list[PyGSnapshot]:
    return [PyGSnapshot(torch.from_numpy(np.stack([s.src, s.dst])).to(device), torch.from_numpy(s.weight).to(device, dtype))
            for s in seq.snapshots]


class ReferenceRun:
    """Train and evaluate a PyG temporal model on a whole `Snapshots` sequence in one process."""

    def __init__(self, model: torch.nn.Module, seq: Snapshots, window: int, lr: float = 0.01,
                 weight_decay: float = 0.0, dtype=torch.float32, device="cpu"):
        self.model, self.seq, self.window = model.to(device, dtype), seq, window
        self.snaps = pyg_snapshots(seq, dtype, device)
        self.x = torch.from_numpy(seq.x).to(device, dtype)
        self.y = torch.from_numpy(seq.y).to(device, dtype if seq.task == "regression" else None)
        # as under DDP: a weight idle in a window still gets a zero gradient, and Adam's momentum moves it
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr, weight_decay=weight_decay)

    def loss_sum(self, out: torch.Tensor, t: int) -> torch.Tensor:
        if self.seq.task == "regression":
            return F.mse_loss(out.squeeze(-1), self.y[t], reduction="sum")
        return F.cross_entropy(out, self.y[t], reduction="sum")

    def run(self, steps: int):
        """Outputs of the first `steps` snapshots from the initial state (with autograd)."""
        state, outs = self.model.init_state(self.seq.num_nodes), []
        for t in range(steps):
            o, state = self.model.step(self.x[t], self.snaps[t], state)
            outs.append(o)
        return outs

    def train_epoch(self) -> float:
        n, seq = self.seq.num_nodes, self.seq
        state, total, wl, k = self.model.init_state(n), 0.0, 0, 0
        for t in range(seq.num_train):
            o, state = self.model.step(self.x[t], self.snaps[t], state)
            wl, k = wl + self.loss_sum(o, t), k + 1
            if k == self.window or t + 1 == seq.num_train:
                self.opt.zero_grad(set_to_none=False)
                (wl / (n * k)).backward()
                self.opt.step()
                total += float(wl.detach()) / n
                state, wl, k = detach_state(state), 0, 0
        return total / seq.num_train

    @torch.no_grad()
    def evaluate(self) -> dict:
        outs, seq = self.run(seq_len := self.seq.num_snapshots), self.seq
        train, test = range(seq.num_train), range(seq.num_train, seq_len)
        if seq.task == "regression":
            mse = lambda ts, pred: float(np.mean([F.mse_loss(pred(t), self.y[t]).item() for t in ts])) if ts else 0.0
            return {"train_mse": mse(train, lambda t: outs[t].squeeze(-1)), "test_mse": mse(test, lambda t: outs[t].squeeze(-1)),
                    "test_last_value_mse": mse(test, lambda t: self.x[t][:, -1])}
        acc = lambda ts: float(np.mean([(outs[t].argmax(1) == self.y[t]).float().mean().item() for t in ts])) if ts else 0.0
        return {"train_acc": acc(train), "test_acc": acc(test)}
