"""Typed graphs distributed equal single-process PyG (RGCNConv, HeteroConv of SAGEConv), P in {1, 2, 4}."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnn_dist.data import load_dataset
from gnn_dist.nn.typed import TYPED_MODELS, PyGTypedGNN, TypedGNN
from partition.typed_parts import write_typed_partition
from tests.conftest import run_worker

pytestmark = pytest.mark.slow  # multi-rank launches: `pytest -m 'not slow'` skips them

SPEC = "hsbm:papers=600,authors=400,venues=6,classes=3,homophily=0.7,seed=4"


@pytest.fixture(scope="module")
def hg():
    return load_dataset(SPEC)


def reference(hg, kind, device="cpu"):
    edge_types = [":".join(e) for e in hg.edge_types]
    torch.manual_seed(0)
    model = TypedGNN(kind, [hg.x[t].shape[1] for t in hg.node_types], 8, hg.num_classes, edge_types, num_bases=2)
    ref = PyGTypedGNN(model, edge_types).double().to(device)
    off = hg.offsets[hg.target]
    out = ref(hg)
    tm = torch.from_numpy(hg.train_mask).to(device)
    logits_t = out[off: off + hg.num_nodes[hg.target]]
    loss = F.cross_entropy(logits_t[tm], torch.from_numpy(hg.y).to(device)[tm], reduction="sum") / int(tm.sum())
    loss.backward()
    return out.detach(), [p.grad.clone() for p in ref.parameters()]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_typed_models_match_single_process_pyg(world, hg, tmp_path):
    part = tmp_path / "h"
    meta = write_typed_partition(part, hg, world)
    counts = np.array(meta["type_counts"])  # per-type balance: every part within 10% of the mean
    assert (counts <= 1.10 * counts.mean(axis=0) + 1).all(), counts
    assert world == 1 or meta["relagg"]["relations_aggregated"] > 0  # the aggregate path is really exercised
    out = tmp_path / "res"
    out.mkdir()
    run_worker(world, "typed_worker.py", str(out), str(part))
    for kind in TYPED_MODELS:
        ref_logits, ref_grads = reference(hg, kind)
        logits = np.zeros(tuple(ref_logits.shape), np.float32)
        for rank in range(world):
            z = np.load(out / f"{kind}-rank{rank}.npz")
            assert bool(z["overlap_identical"]), f"{kind}: overlap on and off differ"
            if kind == "rgcn":  # relation-aggregation-first gives the same logits and gradients
                a = np.load(out / f"rgcn-relagg-rank{rank}.npz")
                np.testing.assert_allclose(a["logits"], z["logits"], rtol=1e-5, atol=1e-6)
                for i in range(len(ref_grads)):
                    np.testing.assert_allclose(a[f"grad_{i}"], z[f"grad_{i}"], rtol=1e-5, atol=1e-6)
                assert world == 1 or a["raf_bytes"] > 0
            logits[z["global_ids"]] = z["logits"]
            for i, g in enumerate(ref_grads):
                np.testing.assert_allclose(z[f"grad_{i}"], g.float().numpy(), rtol=1e-5, atol=1e-6,
                                           err_msg=f"{kind} grad {i}, P={world}")
        np.testing.assert_allclose(logits, ref_logits.float().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{kind} logits, P={world}")
    assert json.loads((part / "partition.json").read_text())["format_version"] == 2
