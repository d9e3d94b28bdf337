"""Distributed results equal single-process PyG: real multi-process launches, P in {1, 2, 4}.

One launch per P covers every built-in model on Cora and an SBM graph, so the
suite pays the start-up cost three times only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnn_dist.graph.local import LocalGraph
from gnn_dist.nn import MODELS, build_model, to_pyg
from gnn_dist.nn.dropout import input_dropout_key
from partition import assign_parts, build_parts, write_partition
from tests.conftest import run_worker
from tests.dist_worker import KEY

pytestmark = pytest.mark.slow  # multi-rank launches: `pytest -m 'not slow'` skips them

EPOCHS = 20


def make_partition(graph, k, out: Path) -> Path:
    parts = assign_parts(graph, k, "metis")
    meta = {"graph": graph.name, "num_parts": k, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
            "num_classes": graph.num_classes}
    write_partition(out, meta, parts, build_parts(graph, parts, k))
    return out


def reference(graph, kind):
    """Single-process PyG twin with identical initial weights: step-0 logits, grads, and 20 Adam epochs."""
    torch.manual_seed(0)
    model = build_model(kind, graph.num_features, 8, graph.num_classes, layers=2, dropout=0.0, heads=2)
    ref = to_pyg(model).double()
    x = torch.from_numpy(graph.x).double()
    ei = torch.stack([torch.from_numpy(a) for a in graph.edge_index()])
    y, tm = torch.from_numpy(graph.y), torch.from_numpy(graph.train_mask)
    n_train = int(tm.sum())
    opt = torch.optim.Adam(ref.parameters(), lr=0.01, weight_decay=5e-4)
    logits = grads = None
    losses = []
    for epoch in range(EPOCHS + 1):
        opt.zero_grad()
        out = ref(x, ei)
        loss = F.cross_entropy(out[tm], y[tm], reduction="sum") / n_train
        loss.backward()
        if epoch == 0:
            logits, grads = out.detach(), [p.grad.clone() for p in ref.parameters()]
            continue
        losses.append(float(loss.detach()))
        opt.step()
    return logits, grads, losses


@pytest.fixture(scope="module")
def graphs(cora):
    from gnn_dist.data import load_dataset

    sbm = load_dataset("sbm:nodes=1500,classes=5,avg_degree=6,homophily=0.7,features=12,seed=1")
    sbm.edge_attr = np.random.default_rng(5).standard_normal((sbm.num_edges, 3)).astype(np.float32)
    return {"cora": cora, "sbm": sbm}


@pytest.fixture(scope="module")
def references(graphs):
    return {(name, kind): reference(g, kind) for name, g in graphs.items() for kind in MODELS}


@pytest.mark.parametrize("world", [1, 2, 4])
def test_matches_single_process_pyg(world, graphs, references, tmp_path):
    dirs = [str(make_partition(g, world, tmp_path / name)) for name, g in graphs.items()]
    out = tmp_path / "res"
    out.mkdir()
    run_worker(world, "dist_worker.py", str(out), *dirs)
    for name, g in graphs.items():
        for kind in MODELS:
            ref_logits, ref_grads, ref_losses = references[(name, kind)]
            logits = np.zeros((g.num_nodes, g.num_classes), np.float32)
            grads, losses = None, None
            for rank in range(world):
                z = np.load(out / f"{name}-{kind}-rank{rank}.npz")
                assert bool(z["overlap_identical"]), f"{name}/{kind}: overlap on and off differ"
                logits[z["global_ids"]] = z["logits"]
                rank_grads = [z[f"grad_{i}"] for i in range(len(ref_grads))]
                if grads is None:
                    grads, losses = rank_grads, z["losses"]
                else:  # after the all-reduce every replica holds the same gradient and loss
                    assert all(np.array_equal(a, b) for a, b in zip(grads, rank_grads))
                    assert np.array_equal(losses, z["losses"])
            np.testing.assert_allclose(logits, ref_logits.float().numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}/{kind} logits, P={world}")
            for i, (a, b) in enumerate(zip(grads, ref_grads)):
                np.testing.assert_allclose(a, b.float().numpy(), rtol=1e-5, atol=1e-6,
                                           err_msg=f"{name}/{kind} grad {i}, P={world}")
            assert np.abs(np.array(losses) - np.array(ref_losses)).max() < 1e-4, f"{name}/{kind} losses P={world}"
        if g.edge_attr is not None:  # edge features reach message() on every rank as in one process
            from tests.test_layer_api import EdgeFeatureConv

            torch.manual_seed(0)
            layer = EdgeFeatureConv(g.num_features, g.edge_attr.shape[1])
            ref = layer(torch.from_numpy(g.x), LocalGraph.from_graph(g))
            ref.pow(2).sum().backward()
            rows = np.zeros(tuple(ref.shape), np.float32)
            for rank in range(world):
                z = np.load(out / f"{name}-edgefeat-rank{rank}.npz")
                rows[z["global_ids"]] = z["out"]
                for i, p in enumerate(layer.parameters()):
                    np.testing.assert_allclose(z[f"grad_{i}"], p.grad.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(rows, ref.detach().numpy(), rtol=1e-5, atol=1e-6)
        # input dropout keyed by node id: the masks one process draws; the halo fetched once or sent, same rows
        torch.manual_seed(0)
        layer = build_model("gcn", g.num_features, 8, 64, layers=1, dropout=0.5)
        single = LocalGraph.from_graph(g)
        with input_dropout_key(KEY):
            ref = layer(single.x, single).detach().numpy()
        assert (ref == 0).mean() < 0.5  # not all dropped; and differs from no dropout:
        assert not np.allclose(ref, layer.eval()(single.x, single).detach().numpy())
        rows = {c: np.zeros_like(ref) for c in (True, False)}
        for rank in range(world):
            z = {c: np.load(out / f"{name}-inputdrop-{c}-rank{rank}.npz") for c in (True, False)}
            for c in (True, False):
                rows[c][z[c]["global_ids"]] = z[c]["out"]
            if world > 1 and name == "sbm":  # 12 features -> 64: the layer aggregates X itself
                assert int(z[True]["sent_L0"]) == 0 and int(z[True]["sent_input"]) > 0
                assert int(z[False]["sent_L0"]) == int(z[True]["sent_input"]) and int(z[False]["sent_input"]) == 0
        assert np.array_equal(rows[True], rows[False]), f"{name}: input cache changed results"
        np.testing.assert_allclose(rows[True], ref, rtol=1e-5, atol=1e-6, err_msg=f"{name} keyed input dropout")
        # int8 messages: close to exact, but not equal (quantisation really happened)
        q = [np.load(out / f"{name}-gcn-int8-rank{r}.npz") for r in range(world)]
        exact = np.array(references[(name, "gcn")][2])
        if world > 1:
            assert np.abs(q[0]["losses"] - exact).max() < 2e-2
            assert not np.allclose(q[0]["losses"], exact, rtol=0, atol=1e-7)

