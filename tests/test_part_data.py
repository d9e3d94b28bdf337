"""A part's topology and its node data are separate objects; the part still reads as `.x`, `.y` and masks."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from gnn_dist.data.synthetic import sbm
from gnn_dist.graph.local import LocalGraph, LocalPart, PartData


def test_graph_holds_topology_only():
    names = {f.name for f in dataclasses.fields(LocalGraph)}
    assert not names & {"x", "y", "train_mask", "val_mask", "test_mask", "num_classes"}


def test_part_reads_and_replaces_its_data():
    g = sbm(nodes=60, avg_degree=4, features=5, classes=3, seed=0)
    part = LocalGraph.from_graph(g)
    assert isinstance(part, LocalPart) and isinstance(part.data, PartData)
    assert part.x is part.data.x and part.num_features == 5 and part.num_classes == g.num_classes
    torch.testing.assert_close(part.x[torch.argsort(torch.from_numpy(part.global_ids))], torch.from_numpy(g.x))
    assert int(part.train_mask.sum()) == int(g.train_mask.sum())
    assert part.is_input(part.x) and not part.is_input(part.x.clone())
    part.x = part.x * 2  # `--normalize-features` replaces the features this way
    assert part.data.x is part.x and part.is_input(part.x)


def test_bare_graph_has_no_node_data():
    part = LocalGraph.from_graph(sbm(nodes=30, avg_degree=4, features=2, classes=2, seed=1))
    bare = LocalGraph(**{f.name: getattr(part, f.name) for f in dataclasses.fields(LocalGraph) if f.init})
    assert not bare.is_input(part.x)
    with pytest.raises(AttributeError):
        bare.x


def test_part_fields_assign_and_copies_own_their_data():
    import copy

    part = LocalGraph.from_graph(sbm(nodes=40, avg_degree=4, features=3, classes=2, seed=2))
    mask = ~part.train_mask
    part.train_mask, part.y = mask, part.y.clone()
    assert part.data.train_mask is mask and part.train_mask is mask
    twin = copy.copy(part)
    twin.x = twin.x + 1  # a copy's features are its own, as when they were the graph's own field
    assert not torch.equal(twin.x, part.x) and part.is_input(part.x) and not part.is_input(twin.x)
    assert twin.indptr is part.indptr  # the topology is shared

