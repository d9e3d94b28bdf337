"""scripts/bench_peak.py, the evidence behind benchmarks.md's "Why 0.35x is out of reach": it must run on a
real partition and name the owners of what it finds alive at the peak."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_partition


@pytest.mark.slow
def test_bench_peak_names_owners(tmp_path: Path):
    part = cli_partition(tmp_path, "sbm:nodes=20000,avg_degree=8,features=64,classes=4", 2)
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, str(ROOT / "scripts" / "bench_peak.py"), str(part),
                        "--hidden", "64"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [row["rank"] for row in rows] == [0, 1]
    for row in rows:
        steps = dict(row["runtime"])
        assert list(steps)[:4] == ["python", "import torch", "gnn-dist imports", "process group, MPI"]
        assert steps["import torch"] > 50  # torch's import is most of a rank's runtime
        assert row["peak"] >= row["resident before the traced epoch"]
        alive = row["alive at the peak (storages >= 1 MB)"]
        assert alive["features"] == pytest.approx(10000 * 64 * 4 / 2**20, abs=0.2)  # (2 parts of 20,000 nodes)
        assert alive["input halo (held)"] > 0  # the once-fetched halo, named as such, not as a step temporary
