"""The partitioner's top-level name `partition` is fixed by the layout; a package of that name that shadows it is
found at import, in one line naming both."""
from __future__ import annotations

import os
import shutil
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
    # another distribution installed over the same folder: its __init__.py replaced ours
    copy = tmp_path / "site"
    for pkg in ("gnn_dist", "partition"):
        shutil.copytree(ROOT / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "partition" / "__init__.py").write_text('"""another project\'s partition package"""\n')
    r = subprocess.run([sys.executable, "-c", "import gnn_dist"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(copy)), cwd=copy)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode != 0 and last == (f"ImportError: {copy / 'partition' / '__init__.py'} is not gnn-dist's "
                                          f"partitioner: another distribution installed a package 'partition' over "
                                          f"it (reinstall gnn-dist, and rename or uninstall the other)"), r.stderr
    ok = subprocess.run([sys.executable, "-c", "import gnn_dist, partition; print(partition.__file__)"],
                        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.startswith(str(ROOT / "partition")), ok.stderr
