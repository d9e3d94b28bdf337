"""A flag that acts on nothing in this model says so: `--staleness` and `--skip-threshold` name their channels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_partition

pytestmark = pytest.mark.slow  # multi-rank launches

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


@pytest.fixture(scope="module")
def cora2(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("flags"), "cora", 2)


@pytest.mark.parametrize("flags, line", [
    (["--staleness", "1"], "--staleness 1 acts on no channel of this model: its layers (L0, L1) send rows after dropout"),
    (["--skip-threshold", "0.5"], "--skip-threshold 0.5 acts on no channel of this model"),
    (["--staleness", "1", "--layers", "3"], "--staleness 1 acts on channels L1, L1.1; L0, L2 go fresh"),
    (["--staleness", "1", "--dropout", "0"], "--staleness 1 acts on channels L0, L1\n"),
])
def test_reuse_flags_name_their_channels(cora2, flags, line):
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "gnn_dist", "train", "--partition", str(cora2),
                        "--epochs", "2", "--progress", "none", *flags], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.count("acts on") == 1 and line in r.stderr, r.stderr


def test_exchange_flags_at_one_rank_say_they_act_on_nothing(tmp_path):
    """One rank has no peer, so no halo: --codec, --staleness and --skip-threshold are said to do nothing."""
    part = cli_partition(tmp_path, "karate", 1)
    r = subprocess.run([sys.executable, "-m", "gnn_dist", "train", "--partition", str(part), "--epochs", "1",
                        "--progress", "none", "--codec", "int8", "--staleness", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "[gnn-dist] --codec int8, --staleness 1 act on nothing at one rank: no halo is exchanged" in r.stderr
