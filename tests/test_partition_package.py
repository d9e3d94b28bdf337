"""The partitioner's top-level name `partition` is fixed by the layout; a package of that name that shadows it is
found at import, in one line naming both."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_a_shadowing_partition_package_is_named(tmp_path):
    (tmp_path / "partition").mkdir()
    (tmp_path / "partition" / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    r = subprocess.run([sys.executable, "-c", "import gnn_dist"], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gnn-dist's partitioner is the package 'partition' at ") and \
        f"but 'partition' is {tmp_path / 'partition'}: another package of that name shadows it" in last, r.stderr
    ok = subprocess.run([sys.executable, "-c", "import gnn_dist, partition; print(partition.__file__)"],
                        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.startswith(str(ROOT / "partition")), ok.stderr
