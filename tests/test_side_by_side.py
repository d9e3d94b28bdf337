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


def test_the_jobs_run_in_other_processes_and_die_with_the_parent(tmp_path):
    """A scheduler's kill of `gnn-dist partition` (or the OOM killer's) must not leave its METIS runs behind."""
    import subprocess
    import sys
    import time

    made = run_all({"a": os.getpid, "b": os.getpid}, workers=2)
    assert os.getpid() not in made.values()
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        "from partition.side_by_side import run_all\n"
        "def job():\n"
        f"    open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close()\n"
        "    time.sleep(120)\n"
        "run_all({'a': job, 'b': job}, workers=2)\n")
    parent = subprocess.Popen([sys.executable, str(script)], cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("[0-9]*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [int(f.name) for f in tmp_path.glob("[0-9]*")]
        assert len(workers) == 2, "the workers never started"
    finally:
        parent.kill()
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[-1][0] != "Z"  # a zombie is dead, waiting to be reaped
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [w for w in workers if alive(w)]
    for w in left:
        os.kill(w, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent"


def test_how_many_candidates_at_once_follows_cpus_memory_and_method(rmat, monkeypatch):
    """Side by side only where two CPUs are usable and the memory holds the working sets; never for a method
    that runs threads of its own."""
    import gnn_dist.runtime.cgroups as cgroups
    import partition.memory as memory
    from gnn_dist.cli.cost_report import candidate_workers
    from gnn_dist.cli.partition_cmd import working_set_bytes

    ws = working_set_bytes(rmat, "metis")
    monkeypatch.setattr(cgroups, "usable_cpus", lambda: 2)
    monkeypatch.setattr(memory, "available_bytes", lambda: (int(2.5 * ws), "MemAvailable"))
    assert candidate_workers(rmat, "metis") == 2 and candidate_workers(rmat, "kahip") == 2
    assert candidate_workers(rmat, "mtkahypar") == 1
    monkeypatch.setattr(memory, "available_bytes", lambda: (ws // 2, "MemAvailable"))
    assert candidate_workers(rmat, "metis") == 1
    monkeypatch.setattr(memory, "available_bytes", lambda: (None, ""))
    assert candidate_workers(rmat, "metis") >= 3
    monkeypatch.setattr(cgroups, "usable_cpus", lambda: 1.5)
    assert candidate_workers(rmat, "metis") == 1
