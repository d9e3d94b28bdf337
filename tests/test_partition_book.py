"""The partition book maps global ids to (part, local id) and back, and rejects ids it does not hold."""
from __future__ import annotations

import numpy as np
import pytest

from partition.book import PartitionBook
from partition.errors import DataError
from partition.store import read_part
from tests.conftest import cli_partition


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
