"""The GPU check's plumbing on the CPU: a broken set-up ends the run in one line, and bench_scale's graph is made
once. (The whole dry run, `bash scripts/gpu_check.sh --dry-run`, takes about a minute: .ci/run runs it.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "scripts" / "gpu_check.sh"


def check(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CHECK), *args], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, OUT=str(tmp_path / "out"), **env))


def test_missing_wheels_end_the_check_in_one_line(tmp_path):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "mpich-0.0.0-py3-none-any.whl").touch()  # pip's empty placeholder is no wheel
    r = check(tmp_path, WHEELS=str(tmp_path / "wheels"))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("setup failed: no wheel of pymetis mpich mpi4py in "), r.stdout
    assert "--fetch-wheels" in lines[-1] and "carry scripts/gpu_wheels" in lines[-1]
    assert len(lines) == 2 and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["setup.txt"]


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="builds a copy of this virtualenv beside a fake mpiexec")
def test_an_mpiexec_that_mpi4py_does_not_speak_to_ends_the_check(tmp_path):
    """A venv whose mpiexec starts each rank alone (as another MPI's does for this mpi4py): both see a world of 1."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    (venv / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    fake = venv / "bin" / "mpiexec"
    fake.write_text('#!/bin/bash\n[ "$1" = --version ] && { echo "mpiexec (Open MPI) 4.1.6"; exit 0; }\n'
                    'n=$2; shift 2\nfor _ in $(seq "$n"); do "$@" & done\nwait\n')
    fake.chmod(0o755)
    r = check(tmp_path, "--dry-run", PY=str(venv / "bin" / "python"))
    assert r.returncode == 2, r.stdout + r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("setup failed: mpi4py's library (") and f"{fake} (mpiexec (Open MPI) 4.1.6) disagree" in last
    assert "worlds of 1 1 (want 2 and 2)" in last


def test_bench_scale_makes_its_graph_once(tmp_path):
    """The children load the saved graph (`file:`), which is the generated one; a second run reuses it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_scale import prepare_graph

    from gnn_dist.data import load_dataset

    spec = "sbm:nodes=500,avg_degree=6,homophily=0.9,features=8,classes=3"
    file_spec, info = prepare_graph(spec, tmp_path)
    made = (tmp_path / "graph.npz").stat().st_mtime_ns
    g, h = load_dataset(spec), load_dataset(file_spec)
    assert info == {"spec": spec, "nodes": 500, "edges": g.num_edges, "features": 8}
    for key in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(h, key), getattr(g, key), err_msg=key)
    assert h.num_classes == g.num_classes
    assert prepare_graph(spec, tmp_path) == (file_spec, info)
    assert (tmp_path / "graph.npz").stat().st_mtime_ns == made
