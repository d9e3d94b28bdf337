"""The README's custom layer runs on the MessagePassing API and computes what it says."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gnn_dist as gd
from gnn_dist.data import load_dataset


class EdgeGatedConv(gd.nn.MessagePassing):  # the README example, verbatim
    def __init__(self, d_in, d_out):
        super().__init__(aggr="sum")
        self.lin = torch.nn.Linear(d_in, d_out)
        self.gate = torch.nn.Linear(2 * d_in, 1)

    def message(self, x_i, x_j):
        return torch.sigmoid(self.gate(torch.cat([x_i, x_j], -1))) * x_j

    def update(self, aggr, x):
        return self.lin(aggr + x)


def test_custom_layer_matches_a_dense_loop():
    g = load_dataset("karate")
    graph = gd.LocalGraph.from_graph(g)
    torch.manual_seed(0)
    layer = EdgeGatedConv(g.num_features, 5)
    x = torch.from_numpy(g.x)
    out = layer(x, graph)
    src, dst = g.edge_index()
    agg = torch.zeros_like(x)
    for s, d in zip(src, dst):
        gate = torch.sigmoid(layer.gate(torch.cat([x[d], x[s]])))
        agg[d] += gate * x[s]
    torch.testing.assert_close(out, layer.lin(agg + x), rtol=1e-5, atol=1e-6)


def test_max_and_mean_aggregation_on_the_edge_path():
    class MaxConv(gd.nn.MessagePassing):
        def __init__(self, aggr):
            super().__init__(aggr=aggr)

        def message(self, x_j):
            return x_j

    g = load_dataset("karate")
    graph = gd.LocalGraph.from_graph(g)
    x = torch.randn(g.num_nodes, 3)
    src, dst = g.edge_index()
    for aggr, fn in (("max", np.max), ("mean", np.mean)):
        out = MaxConv(aggr)(x, graph).numpy()
        for v in range(g.num_nodes):
            np.testing.assert_allclose(out[v], fn(x.numpy()[src[dst == v]], axis=0), rtol=1e-6)


def test_gcn_keeps_existing_weighted_self_loops_like_pyg():
    """PyG's GCNConv adds a unit loop only where a node has none (add_remaining_self_loops)."""
    from torch_geometric.nn import GCNConv as PyGGCN

    from partition.graph import Graph

    rng = np.random.default_rng(0)
    n = 30
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)
    loops = np.arange(0, n, 3)  # a third of the nodes carry a weighted loop
    src, dst = np.concatenate([src[src != dst], loops]), np.concatenate([dst[src != dst], loops])
    w = rng.uniform(0.5, 5.0, src.shape[0]).astype(np.float32)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    g = Graph.from_edges(src, dst, n, x, np.zeros(n), *(np.ones(n, bool),) * 3, edge_weight=w)
    torch.manual_seed(0)
    ours = gd.nn.GCNConv(4, 3)
    ref = PyGGCN(4, 3)
    ref.load_state_dict(ours.state_dict())
    edge_index = torch.from_numpy(np.stack([src, dst]))
    torch.testing.assert_close(ours(torch.from_numpy(x), gd.LocalGraph.from_graph(g)),
                               ref(torch.from_numpy(x), edge_index, torch.from_numpy(w)), rtol=1e-5, atol=1e-6)


class EdgeFeatureConv(gd.nn.MessagePassing):
    """Messages scaled by a learned function of each edge's features."""

    def __init__(self, d_in, d_edge):
        super().__init__(aggr="sum")
        self.edge = torch.nn.Linear(d_edge, d_in)

    def message(self, x_j, edge_attr):
        return x_j * torch.sigmoid(self.edge(edge_attr))


def _graph_with_edge_features():
    from partition.graph import Graph

    rng = np.random.default_rng(1)
    n, e = 40, 200
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    attr = rng.standard_normal((e, 3)).astype(np.float32)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    ones = np.ones(n, bool)
    return Graph.from_edges(src, dst, n, x, np.zeros(n), ones, ones, ones, edge_attr=attr), src, dst, attr


def test_message_reads_edge_features():
    g, src, dst, attr = _graph_with_edge_features()
    torch.manual_seed(0)
    layer = EdgeFeatureConv(4, 3)
    x = torch.from_numpy(g.x)
    out = layer(x, gd.LocalGraph.from_graph(g))
    expected = torch.zeros_like(x)
    for s, d, a in zip(src, dst, attr):
        expected[d] += x[s] * torch.sigmoid(layer.edge(torch.from_numpy(a)))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_edge_features_survive_partitioning(tmp_path):
    from partition import assign_parts, build_parts, read_part, write_partition

    g, src, dst, attr = _graph_with_edge_features()
    parts = assign_parts(g, 3, "metis")
    write_partition(tmp_path / "p", {"num_parts": 3, "num_nodes": g.num_nodes}, parts, build_parts(g, parts, 3))
    want = {}
    for s, d, a in zip(src, dst, attr):
        want.setdefault((int(s), int(d)), []).append(a.tolist())
    got = {}
    for p in range(3):
        plan = read_part(tmp_path / "p", p)
        rows = np.repeat(np.arange(plan.num_inner), np.diff(plan.indptr))
        for r, c, a in zip(rows, plan.indices, plan.edge_attr):
            got.setdefault((int(plan.global_ids[c]), int(plan.global_ids[r])), []).append(a.tolist())
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}


def test_layers_exchange_the_cheaper_side():
    """Aggregating first sends d_in columns (and d_in back only if x needs a gradient); transforming first
    sends d_out and d_out back: input features (no gradient) of width up to 2 d_out are aggregated first."""
    from gnn_dist.nn.conv import aggregate_first

    feats, hidden = torch.zeros(3, 128), torch.zeros(3, 128, requires_grad=True)
    assert aggregate_first(feats, 128, 128) and aggregate_first(feats, 128, 64)
    assert not aggregate_first(feats, 1433, 16)
    assert aggregate_first(hidden, 128, 128) and not aggregate_first(hidden, 128, 64)
    with torch.no_grad():  # evaluation: nothing goes back, the narrower side goes forward
        assert not aggregate_first(feats, 128, 64) and aggregate_first(feats, 64, 128)


class GATv2Port(gd.nn.MessagePassing):
    """PyG's GATv2Conv (one head, no self loops), ported as a user would: softmax(alpha, index, ptr, size_i)."""

    def __init__(self, d_in, d_out):
        super().__init__(aggr="add")
        self.lin_l = torch.nn.Linear(d_in, d_out)
        self.lin_r = torch.nn.Linear(d_in, d_out)
        self.att = torch.nn.Parameter(torch.randn(1, 1, d_out))
        self.bias = torch.nn.Parameter(torch.zeros(d_out))

    def forward(self, x, graph):
        return self.propagate(graph, x=(self.lin_l(x), self.lin_r(x))) + self.bias

    def message(self, x_j, x_i, index, ptr, size_i):
        from torch_geometric.utils import softmax

        e = torch.nn.functional.leaky_relu(x_i + x_j, 0.2)
        alpha = softmax((e * self.att.view(1, -1)).sum(-1), index, ptr, size_i)
        return x_j * alpha.unsqueeze(-1)


def test_a_pyg_port_with_size_i_ptr_and_bipartite_x_matches_pyg():
    from torch_geometric.nn import GATv2Conv

    g = load_dataset("karate")
    torch.manual_seed(0)
    ours = GATv2Port(g.num_features, 6)
    ref = GATv2Conv(g.num_features, 6, add_self_loops=False, share_weights=False)
    with torch.no_grad():
        ref.lin_l.weight.copy_(ours.lin_l.weight), ref.lin_l.bias.copy_(ours.lin_l.bias)
        ref.lin_r.weight.copy_(ours.lin_r.weight), ref.lin_r.bias.copy_(ours.lin_r.bias)
        ref.att.copy_(ours.att), ref.bias.copy_(ours.bias)
    x = torch.from_numpy(g.x)
    ei = torch.stack([torch.from_numpy(a) for a in g.edge_index()]).long()
    torch.testing.assert_close(ours(x, gd.LocalGraph.from_graph(g)), ref(x, ei), rtol=1e-5, atol=1e-6)


def test_message_gets_local_edge_ids_and_input_by_name():
    seen = {}

    class Probe(gd.nn.MessagePassing):
        def message(self, x_j, x_i, x, edge_index_i, edge_index_j, size_j):
            seen["ok"] = torch.equal(x_j, x[edge_index_j]) and torch.equal(x_i, x[edge_index_i])
            seen["size_j"] = size_j
            return x_j

    g = load_dataset("karate")
    Probe()(torch.randn(g.num_nodes, 3), gd.LocalGraph.from_graph(g))
    assert seen == {"ok": True, "size_j": g.num_nodes}


def test_wrong_inputs_get_one_line_errors():
    import pytest

    class Needs(gd.nn.MessagePassing):
        def update(self, aggr, h):
            return aggr + h

    g = gd.LocalGraph.from_graph(load_dataset("karate"))
    with pytest.raises(TypeError, match=r"Needs.update wants 'h' but propagate got no 'h' \(got: x\)"):
        Needs()(torch.randn(34, 2), g)
    with pytest.raises(ValueError, match="'x' has 30 rows but this part has 34 inner rows"):
        gd.nn.MessagePassing()(torch.randn(30, 2), g)

    class Asks(gd.nn.MessagePassing):
        def message(self, x_j, colour_j):
            return x_j

    with pytest.raises(TypeError, match="Asks.message wants 'colour_j'"):
        Asks()(torch.randn(34, 2), g)


def test_the_public_api_is_listed_and_documented():
    for name in ("init", "Trainer", "load_partition", "LocalGraph", "ModelConfig", "ExchangeConfig", "nn"):
        assert name in dir(gd) and name in gd.__all__
    for name in ("MessagePassing", "BatchNorm", "GCNConv", "ModelConfig"):
        assert name in dir(gd.nn)
    for method in ("message", "update", "forward", "propagate"):
        assert getattr(gd.nn.MessagePassing, method).__doc__, method


def test_a_broken_collective_is_told_apart_from_a_user_error():
    """A gloo failure surfaces in a work handle's wait(); a shape bug in model code does not."""
    from gnn_dist.runtime.launch import describe_user_error, is_collective_failure

    class Work:
        def wait(self):
            raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")

    def transfer(work):
        work.wait()

    try:
        transfer(Work())
    except RuntimeError as e:
        assert is_collective_failure(e)
    try:
        torch.nn.Linear(3, 2)(torch.zeros(4, 5))
    except RuntimeError as e:
        assert not is_collective_failure(e)
        line = describe_user_error(e)
        assert line.startswith("RuntimeError in ") and "test_layer_api.py" in line and "\n" not in line


def test_ctrl_c_in_a_collective_is_an_interrupt_not_a_lost_peer(monkeypatch):
    """mpiexec hands Ctrl-C to every rank, most of them inside a collective's wait: a README-style script's
    ranks each waited 3 s for a failed peer, then printed `collective failed: KeyboardInterrupt` and left
    with 1; they leave at once with 130, as the CLI does."""
    from gnn_dist.runtime import launch

    ctx = launch.DistContext(0, 2, 0, 2, torch.device("cpu"), "gloo", launcher="torchrun")
    left = []

    def fail(message, code=1, publish=False):
        left.append((message, code, publish))
        raise SystemExit(code)

    monkeypatch.setattr(ctx, "fail", fail)
    monkeypatch.setattr(launch, "is_collective_failure", lambda exc: True)  # interrupted inside a wait()
    with pytest.raises(SystemExit):
        ctx.leave_on(KeyboardInterrupt())
    assert left == [("interrupted", 130, True)]


def test_the_builtin_exit_is_noted_like_sys_exit(monkeypatch):
    """A script's `exit(3)` (site's builtin) outside `with gd.init()` must be seen at interpreter exit as
    sys.exit(3) is: unnoted, the rank waited in close for peers blocked in a collective (a 2-rank job hung
    past 200 s), and the line it prints names the script's line, not site's."""
    import builtins
    import io
    import sys

    from gnn_dist.runtime import failure, launch

    for owner, name in ((sys, "exit"), (builtins, "exit"), (builtins, "quit"), (sys, "excepthook")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # put back after the test
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # site's exit closes stdin
    monkeypatch.setattr(launch, "_EXIT", {})
    launch._watch_exits()
    with pytest.raises(SystemExit) as raised:
        builtins.exit(3)
    assert launch._EXIT["status"] == 3 and "test_layer_api.py" in launch._EXIT["where"]
    assert failure.describe_user_error(raised.value).startswith("sys.exit(3) in ")
    assert "test_layer_api.py" in failure.describe_user_error(raised.value)
