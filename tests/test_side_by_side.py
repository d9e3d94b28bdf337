"""The default partition's candidates made side by side in forked processes (partition.side_by_side): the
same partitions as one after another, a candidate that cannot be made left out, any other error raised in
the parent, and a worker killed mid-run one line, never a hang."""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from gnn_dist.data import load_dataset
from partition import assign_parts
from partition.cost_parts import choose
from partition.costmodel import Workload
from partition.errors import DataError, GnnDistError
from partition.machine import DEFAULT
from partition.side_by_side import run_all


@pytest.fixture(scope="module")
def rmat():
    return load_dataset("rmat:scale=11,edges=30000,seed=2")


def test_candidates_side_by_side_are_the_candidates_one_after_another(rmat):
    work = Workload(features=rmat.num_features, classes=rmat.num_classes, hidden=128, layers=3)

    def run(weights):
        return assign_parts(rmat, 4, "metis", vweights=None if weights is None else weights[:, None])

    others = {"volume": lambda: assign_parts(rmat, 4, "metis", objective="vol")}
    alone, side = (choose(rmat, 4, run, work, DEFAULT, others, workers=w) for w in (1, 3))
    assert alone.name == side.name and alone.considered == side.considered
    assert np.array_equal(alone.parts, side.parts)


def test_a_job_that_cannot_be_made_is_returned_and_other_errors_raised():
    def refused():
        raise DataError("a part would be empty")

    for workers in (1, 2):
        made = run_all({"a": lambda: np.arange(3), "b": refused, "c": lambda: {"x": 2}}, workers)
        assert list(made) == ["a", "b", "c"] and np.array_equal(made["a"], [0, 1, 2]) and made["c"] == {"x": 2}
        assert isinstance(made["b"], DataError) and "empty" in str(made["b"])
    with pytest.raises(ZeroDivisionError):
        run_all({"a": lambda: np.arange(3), "b": lambda: 1 // 0}, workers=2)


def test_a_worker_killed_mid_run_is_one_line_not_a_hang():
    def killed():
        os.kill(os.getpid(), signal.SIGKILL)  # the kernel's OOM killer does the same

    with pytest.raises(GnnDistError, match="partitioner process died") as e:
        run_all({"a": lambda: np.arange(3), "b": killed}, workers=2)
    assert "\n" not in str(e.value)
