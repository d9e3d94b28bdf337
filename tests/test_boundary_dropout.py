"""Hidden layers' boundary rows sent before dropout where the exchange reuses rows (gnn_dist.nn.boundary)."""
from __future__ import annotations

import json

import pytest
import torch

from gnn_dist.nn.boundary import KeyedDropout
from gnn_dist.nn.dropout import _drop_below, hash32
from tests.conftest import run_cli, run_mpi


@pytest.mark.parametrize("rows", [30, 600])  # the torch twin, and numba's kernel (65,536 items and more)
def test_keyed_dropout_backward_is_the_forward_mask_and_scale(rows):
    w, p, key = 128, 0.5, 987654321
    x = torch.randn(rows, w, requires_grad=True)
    ids = torch.randperm(5 * rows)[:rows]
    out = KeyedDropout.apply(x, ids, p, key)
    grad = torch.randn(rows, w)
    out.backward(grad)
    keep = hash32(key, ids.view(-1, 1) * w + torch.arange(w)) >= _drop_below(p)
    assert 0.45 < keep.float().mean() < 0.55
    scale = 1.0 / (1.0 - p)
    assert torch.equal(out.detach(), torch.where(keep, x.detach() * scale, torch.zeros(())))
    assert torch.equal(x.grad, torch.where(keep, grad * scale, torch.zeros(())))


def _losses(log) -> list[float]:
    return [json.loads(line)["loss"] for line in open(log) if '"loss"' in line]


@pytest.mark.slow
def test_skipping_nothing_trains_alike_at_any_rank_count(tmp_path):
    """With rows reused (here: skipped only if they did not move at all, so every value is exact), the
    hidden layers' halo copies are dropped by node id exactly as their owners drop them: 2 and 3 ranks,
    whose halos differ, see the same masks and train alike (GIN: every layer aggregates its input).
    Dropped after sending, with each rank's own mask stream, the runs' losses part at the first epoch
    (checked by planting that)."""
    spec = "sbm:nodes=600,avg_degree=8,features=16,classes=4,seed=3"
    logs = {}
    for parts in (2, 3):
        out = tmp_path / f"p{parts}"
        r = run_cli("partition", "--dataset", spec, "--parts", str(parts), "--out", str(out))
        assert r.returncode == 0, r.stderr
        logs[parts] = tmp_path / f"p{parts}.jsonl"
        run_mpi(parts, "train", "--partition", str(out), "--model", "gin", "--layers", "3", "--hidden", "16", "--epochs", "6",
                "--eval-every", "0", "--progress", "none", "--skip-threshold", "1e-30", "--log", str(logs[parts]))
    two, three = _losses(logs[2]), _losses(logs[3])
    assert len(two) == len(three) == 6
    assert two == pytest.approx(three, rel=1e-5, abs=1e-6)
    assert two[-1] < two[0]


@pytest.mark.parametrize("kind", ["gcn", "sage", "gat"])
def test_without_dropout_every_layer_may_reuse_rows(kind):
    """Rows are kept fresh only because dropout's mask moves them each step; with `--dropout 0` nothing
    does, so staleness and skipping keep saving every layer's exchange (GAT's included), as before."""
    from gnn_dist.nn.models import GNN

    plain = GNN(kind, 16, 32, 4, layers=3, dropout=0.0)
    assert all(conv.reuse_rows for conv in plain.convs)
    dropped = GNN(kind, 16, 32, 4, layers=3, dropout=0.5)
    assert not dropped.convs[-1].reuse_rows  # a narrowing last layer (or GAT) sends x W of dropped rows
