"""`gnn_dist.runtime.tuning`: the environment's overrides are read at init, not at import; bad values are one line."""
from __future__ import annotations

import subprocess
import sys

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
