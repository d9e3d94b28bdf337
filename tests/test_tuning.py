"""`gnn_dist.runtime.tuning`: the environment's overrides are read at init, not at import; bad values are one line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gnn_dist.errors import LaunchError
from gnn_dist.runtime import tuning
from tests.conftest import ROOT, cli_partition, one_error_line, run_cli


def test_overrides_are_read_by_read_environment_not_by_import():
    code = ("import gnn_dist.runtime.codec, gnn_dist.nn.dropout, gnn_dist.runtime.transport\n"
            "from gnn_dist.runtime import tuning\n"
            "before = (tuning.ENV.codec_backend, tuning.ENV.dropout_backend, tuning.ENV.mpi_max_rows)\n"
            "tuning.read_environment()\n"
            "print(before, (tuning.ENV.codec_backend, tuning.ENV.dropout_backend, tuning.ENV.mpi_max_rows))\n")
    env = {"GNN_DIST_CODEC": "torch", "GNN_DIST_DROPOUT": "torch", "GNN_DIST_MPI_MAX_ROWS": "7", "PATH": ""}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.stdout.strip() == "('auto', 'auto', 16384) ('torch', 'torch', 7)", r.stderr


@pytest.mark.parametrize("env, needle", [({"GNN_DIST_CODEC": "fast"}, "GNN_DIST_CODEC='fast'"),
                                         ({"GNN_DIST_MPI_MAX_ROWS": "1e3"}, "GNN_DIST_MPI_MAX_ROWS='1e3'"),
                                         ({"GNN_DIST_HOST_CORES": "-2"}, "GNN_DIST_HOST_CORES='-2'")])
def test_a_bad_override_is_one_line(env, needle):
    saved = {f: getattr(tuning.ENV, f) for f in vars(tuning.ENV)}
    with pytest.raises(LaunchError, match=needle):
        tuning.read_environment(env)
    assert vars(tuning.ENV) == saved  # nothing half-set
    assert tuning.read_environment({"GNN_DIST_HOST_CORES": "0.5"}).host_cores == 0.5
    tuning.read_environment({})
    assert vars(tuning.ENV) == vars(tuning.Environment())


def test_train_refuses_a_bad_override_in_one_line(tmp_path):
    part = cli_partition(tmp_path, "karate", 1)
    r = run_cli("train", "--partition", str(part), "--epochs", "1", env={"GNN_DIST_DROPOUT": "numba"})
    one_error_line(r, "GNN_DIST_DROPOUT='numba': choose one of auto, torch")


@pytest.mark.slow
def test_ranks_that_disagree_on_the_duplex_flag_stop_in_one_line(tmp_path):
    """GNN_DIST_GLOO_DUPLEX set on one rank only would have them post different transfers to each other (a
    hang until the collective timeout): the launcher compares it across ranks first."""
    part = cli_partition(tmp_path, "karate", 2)
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    cmd = [sys.executable, "-m", "gnn_dist", "train", "--partition", str(part), "--epochs", "1", "--timeout", "60"]
    r = subprocess.run([mpiexec, "-n", "1", "-env", "GNN_DIST_GLOO_DUPLEX", "0", *cmd, ":", "-n", "1", *cmd],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode != 0 and "GNN_DIST_GLOO_DUPLEX differs between ranks" in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert lines and all("GNN_DIST_GLOO_DUPLEX differs" in ln for ln in lines), r.stderr[-2000:]
