"""The default message means one thing on both paths, and equals PyG: every allowed (aggr, norm) row of
MessagePassing's table, weighted and unweighted, default and hand-written message, at P = 1, 2 and 4.

One mpiexec launch per P runs the whole matrix (tests/message_worker.py); the single-process run of the
same matrix fails fast and names the case.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import gnn_dist as gd
from partition import assign_parts, build_parts, write_partition
from partition.graph import Graph
from tests.conftest import run_worker
from tests.message_cases import CASES, OUT, make_layer, pyg_reference, readout

N = 90


def random_graph(weighted: bool) -> Graph:
    """Duplicate edges, weighted self loops on some nodes, and nodes with no in-edge at all."""
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, N, 500), rng.integers(0, N - 6, 500)  # the last 6 nodes receive nothing
    loops = np.arange(0, N, 4)
    src, dst = np.concatenate([src[src != dst], loops]), np.concatenate([dst[src != dst], loops])
    w = rng.uniform(0.5, 1.5, src.shape[0]).astype(np.float32) if weighted else None
    x = rng.standard_normal((N, 5)).astype(np.float32)
    ones = np.ones(N, bool)
    return Graph.from_edges(src, dst, N, x, np.zeros(N), ones, ones, ones, edge_weight=w)


GRAPHS = {"weighted": random_graph(True), "unweighted": random_graph(False)}


def reference(graph_name: str, case) -> tuple[np.ndarray, dict]:
    g = GRAPHS[graph_name]
    src, dst = g.edge_index()
    ei = torch.stack([torch.from_numpy(src), torch.from_numpy(dst)]).long()
    w = torch.from_numpy(g.edge_weight).double() if g.edge_weight is not None else None
    layer = make_layer(*case, in_channels=g.num_features)
    out, grads = pyg_reference(layer, case[0], case[1], torch.from_numpy(g.x).double(), ei, w)
    return out.numpy(), {k: v.numpy() for k, v in grads.items()}


@pytest.mark.parametrize("graph_name", list(GRAPHS))
@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_one_process_matches_pyg(graph_name, case):
    g = GRAPHS[graph_name]
    layer = make_layer(*case, in_channels=g.num_features)
    out = layer(torch.from_numpy(g.x), gd.LocalGraph.from_graph(g))
    readout(out, torch.arange(N)).backward()
    ref_out, ref_grads = reference(graph_name, case)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-5, atol=1e-6, err_msg=str(case))
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), ref_grads[name], rtol=1e-5, atol=1e-6, err_msg=f"{case} {name}")


def test_weights_matter_on_this_graph():
    """The matrix could not tell weighted from unweighted messages if the weights changed nothing."""
    a, _ = reference("weighted", ("sum", "none", "default"))
    b, _ = reference("unweighted", ("sum", "none", "default"))
    assert np.abs(a - b).max() > 0.1


@pytest.mark.parametrize("aggr,norm,needle", [("mean", "gcn", "norm='gcn' needs aggr='sum'"),
                                              ("max", "gcn", "norm='gcn' needs aggr='sum'"),
                                              ("sum", "mean", "use aggr='mean'"),
                                              ("median", "none", "aggr must be sum (or add), mean or max")])
def test_refused_combinations_say_why_in_one_line(aggr, norm, needle):
    with pytest.raises(ValueError) as e:
        gd.nn.MessagePassing(aggr=aggr, norm=norm)
    assert needle in str(e.value) and "\n" not in str(e.value)


def _partition(g: Graph, k: int, out: Path) -> str:
    parts = assign_parts(g, k, "metis")
    write_partition(out, {"num_parts": k, "num_nodes": g.num_nodes, "num_edges": g.num_edges, "num_classes": 1},
                    parts, build_parts(g, parts, k))
    return str(out)


# P=2 stays in the fast subset, which keeps a handful of multi-rank launches (tests/conftest.py)
@pytest.mark.parametrize("world", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(4, marks=pytest.mark.slow)])
def test_distributed_matrix_matches_pyg(world, tmp_path):
    dirs = [_partition(GRAPHS[name], world, tmp_path / name) for name in ("weighted", "unweighted")]
    out = tmp_path / "res"
    out.mkdir()
    run_worker(world, "message_worker.py", str(out), *dirs)
    for graph_name in GRAPHS:
        for case in CASES:
            ref_out, ref_grads = reference(graph_name, case)
            rows = np.full((N, OUT), np.nan, np.float32)
            for rank in range(world):
                z = np.load(out / f"{graph_name}-{'-'.join(case)}-rank{rank}.npz")
                rows[z["global_ids"]] = z["out"]
                for name, g in ref_grads.items():
                    np.testing.assert_allclose(z[f"grad_{name}"], g, rtol=1e-5, atol=1e-6,
                                               err_msg=f"{graph_name} {case} {name} P={world}")
            np.testing.assert_allclose(rows, ref_out, rtol=1e-5, atol=1e-6, err_msg=f"{graph_name} {case} P={world}")
        # gd.nn.BatchNorm on P ranks equals torch's BatchNorm1d over all rows in one process
        g = GRAPHS[graph_name]
        torch.manual_seed(1)
        ref = torch.nn.BatchNorm1d(g.num_features).double()
        x = torch.from_numpy(g.x).double().requires_grad_(True)
        gids = torch.arange(N)
        y = ref(x * (1 + gids.unsqueeze(1) % 3))
        readout(y, gids).backward()
        got = {k: np.zeros_like(v) for k, v in (("out", y.detach().numpy()), ("grad_x", x.grad.numpy()))}
        for rank in range(world):
            z = np.load(out / f"{graph_name}-batchnorm-rank{rank}.npz")
            for k in got:
                got[k][z["global_ids"]] = z[k]
            np.testing.assert_allclose(z["running_mean"], ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(z["running_var"], ref.running_var.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(z["grad_weight"], ref.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["out"], y.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["grad_x"], x.grad.numpy(), rtol=1e-4, atol=1e-5)
