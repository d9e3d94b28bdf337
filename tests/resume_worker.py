"""Run under mpiexec by tests/test_resume_policies.py: per exchange policy, a run straight through, and a run
stopped after a checkpoint then resumed by fresh objects; plus every hidden dropout mask the straight runs drew,
and how many rows' masks were keyed by node id (gnn_dist.nn.boundary: the hidden layer that aggregates its input,
under the policies that reuse rows).

Usage: mpiexec -n 2 python tests/resume_worker.py OUT PART_DIR
Writes OUT/<policy>-rank<R>.npz: per-epoch losses of both runs, final weights of both, and the masks.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from gnn_dist.graph.load import load_partition
from gnn_dist.nn import boundary, build_model
from gnn_dist.nn import dropout as dropout_mod
from gnn_dist.runtime import streams
from gnn_dist.runtime.exchange import ExchangeConfig
from gnn_dist.runtime.launch import init
from gnn_dist.train.node import Trainer

EPOCHS, STOP, SEED = 7, 3, 11  # checkpoint after epoch STOP - 1; the resumed run does epochs STOP..EPOCHS-1
# a pinned link model (seconds per byte, per message): start-up measurements would differ between runs
LINKS = {(0, 1): (2e-9, 1e-5), (1, 0): (5e-9, 1e-5)}
POLICIES = {
    "fp32": {},
    "int8": {"codec": "int8"},
    "stale": {"staleness": 1},  # blocks in flight at the checkpoint, and the smoothed block in use
    # stale gradients too, and the drift-corrected form's last received block and smoothed drift
    "stale-correct": {"staleness": 1, "stale_form": "correct", "stale_grads": "same"},
    # the checkpoint falls at the end of an exact warm-up: the resumed run's first step is the first stale one
    "stale-warmup": {"staleness": 1, "stale_form": "correct", "stale_warmup": STOP},
    "skip": {"skip_threshold": 1.0, "refresh_every": 4},  # skips a third to a half of the rows; refresh after STOP
    "adaptive": {"codec": "adaptive", "adaptive_every": 2, "links": LINKS},  # solved at 1, 2, 4, 6
}


def record_masks() -> list:
    """Every hashed dropout mask drawn from now on (the keep/drop draw itself, before any ReLU)."""
    masks, keys = [], []
    draw, forward = streams.dropout_key, dropout_mod.HashDropout.forward

    def key() -> int:
        keys.append(draw())
        return keys[-1]

    def spy(ctx, x, p, relu=False):
        out = forward(ctx, x, p, relu)
        masks.append((dropout_mod.hash32(keys[-1], torch.arange(x.numel())) >= dropout_mod._drop_below(p)).numpy())
        return out

    streams.dropout_key = key
    dropout_mod.HashDropout.forward = staticmethod(spy)
    return masks


def count_keyed() -> list:
    """Rows (inner and halo) dropped by `boundary.KeyedDropout` from now on: the policy reached the keyed path."""
    rows, forward = [], boundary.KeyedDropout.forward

    def spy(ctx, x, ids, p, key):
        rows.append(int(x.shape[0]))
        return forward(ctx, x, ids, p, key)

    boundary.KeyedDropout.forward = staticmethod(spy)
    return rows


def run(part: str, ctx, config: dict, epochs: int, ckpt: Path | None, resume: bool = False):
    """Fresh partition, exchange, model and trainer, as a new process would make them."""
    graph = load_partition(part, ctx, exchange=ExchangeConfig(**config))
    torch.manual_seed(SEED)
    # 32 -> 32 aggregates its input: where rows are reused, they cross before dropout (gnn_dist.nn.boundary)
    model = build_model("gcn", graph.num_features, 32, graph.num_classes, layers=3, dropout=0.5)
    trainer = Trainer(model, graph, ctx, seed=SEED, eval_every=0, progress=False,
                      checkpoint_dir=str(ckpt) if ckpt else None, checkpoint_every=STOP if ckpt else 0)
    trainer.fit(epochs, resume=resume)
    return [r["loss"] for r in trainer.history], {k: v.clone() for k, v in model.state_dict().items()}


def main() -> None:
    out, part = Path(sys.argv[1]), sys.argv[2]
    ctx = init(expected_world=2)
    masks, keyed = record_masks(), count_keyed()
    for name, config in POLICIES.items():
        del masks[:], keyed[:]
        straight, w_straight = run(part, ctx, config, EPOCHS, None)
        drawn, keyed_rows = list(masks), sum(keyed)
        ckpt = out / f"ckpt-{name}"
        run(part, ctx, config, STOP, ckpt)
        resumed, w_resumed = run(part, ctx, config, EPOCHS, ckpt, resume=True)
        np.savez(out / f"{name}-rank{ctx.rank}.npz", straight=np.array(straight), resumed=np.array(resumed),
                 weights_equal=all(torch.equal(w_straight[k], w_resumed[k]) for k in w_straight), keyed=keyed_rows,
                 **{f"mask{i}": m for i, m in enumerate(drawn)})
    ctx.close()


if __name__ == "__main__":
    main()
