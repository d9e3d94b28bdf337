"""A user's script in the README's style whose one rank fails mid-training (tests/test_rank_errors.py,
scripts/fault_table.py).

Usage: python tests/fault_worker.py PARTITION FAIL_RANK|all raise|raise-own|exit3|raise-exit3 with|plain [TIMEOUT_S]
`raise`: ValueError in forward at epoch 3 (`raise-own`: its message names the rank); `exit3`: sys.exit(3) there;
`raise-exit3`: a bare `raise SystemExit(3)`. FAIL_RANK `all`: every rank fails so.
`with`: the context is a `with` block; `plain`: gd.init() only, closed at interpreter exit. TIMEOUT_S: any
collective's (default 120).
"""
import sys

import torch

import gnn_dist as gd

FAIL_RANK, MODE, STYLE = sys.argv[2], sys.argv[3], sys.argv[4]
TIMEOUT_S = float(sys.argv[5]) if len(sys.argv) > 5 else 120.0


class Faulty(torch.nn.Module):
    """A built-in model whose forward on one rank fails in the fourth training pass (epoch 3)."""

    def __init__(self, inner: torch.nn.Module, rank: int):
        super().__init__()
        self.inner, self.rank, self.calls = inner, rank, 0

    def forward(self, x, graph):
        if self.training:
            self.calls += 1
            if FAIL_RANK in ("all", str(self.rank)) and self.calls == 4:
                if MODE == "exit3":
                    sys.exit(3)
                if MODE == "raise-exit3":
                    raise SystemExit(3)
                raise ValueError("bad value at epoch 3" + (f" on rank {self.rank}" if MODE == "raise-own" else ""))
        return self.inner(x, graph)


def train(ctx) -> None:
    part = gd.load_partition(sys.argv[1], ctx)
    model = Faulty(gd.nn.build_model("gcn", part.num_features, 16, part.num_classes), ctx.rank)
    gd.Trainer(model, part, ctx, progress=False, eval_every=0).fit(epochs=50)


if STYLE == "with":
    with gd.init(timeout_s=TIMEOUT_S) as ctx:
        train(ctx)
else:
    train(gd.init(timeout_s=TIMEOUT_S))
