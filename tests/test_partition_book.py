"""The partition book maps global ids to (part, local id) and back, and rejects ids it does not hold."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from partition.book import PartitionBook
from partition.errors import DataError, PartitionFormatError
from partition.store import read_part
from tests.conftest import cli_partition


@pytest.mark.slow
def test_round_trip_and_errors(tmp_path):
    part = cli_partition(tmp_path, "cora", 3)
    book = PartitionBook(part)
    gids = np.random.default_rng(0).permutation(book.num_nodes)[:500]
    parts, local = book.to_local(gids)
    for p in range(3):
        sel = parts == p
        assert np.array_equal(book.to_global(p, local[sel]), gids[sel])
        plan = read_part(part, p)
        assert np.array_equal(plan.global_ids[local[sel]], gids[sel])  # local id = LocalGraph row
    with pytest.raises(DataError, match="global node id 2708 is out of range for 2708 nodes"):
        book.to_local([0, 2708])
    with pytest.raises(DataError, match="part 3 does not exist"):
        book.inner_nodes(3)


@pytest.mark.slow
def test_the_book_reads_through_the_checksums(tmp_path):
    part = cli_partition(tmp_path, "cora", 2)
    node_map = np.load(part / "node_map.npy")
    node_map[0] = 1 - node_map[0]  # an edited assignment, same shape: only the checksum can tell
    np.save(part / "node_map.npy", node_map)
    book = PartitionBook(part)
    assert book.inner_nodes(0).shape[0] > 0  # the parts themselves are intact
    with pytest.raises(PartitionFormatError, match="node_map.npy fails its checksum"):
        book.part_of([0])
    assert PartitionBook(part, verify=False).part_of([0])[0] == node_map[0]


@pytest.mark.slow  # seconds of subprocess start-up: the full suite runs it, the fast subset has others of its kind
def test_a_loaded_part_shares_its_rows_with_the_book(tmp_path):
    from gnn_dist.graph.load import load_partition
    from gnn_dist.runtime.launch import DistContext

    part = cli_partition(tmp_path, "cora", 1)
    ctx = DistContext(rank=0, world_size=1, local_rank=0, local_size=1, device=torch.device("cpu"), backend="gloo")
    graph = load_partition(part, ctx)
    assert graph.book.local_rows(0) is graph.global_ids  # one id map, not a copy
    assert np.array_equal(graph.book.to_global(0, np.arange(5)), graph.global_ids[:5])
