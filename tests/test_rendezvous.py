"""The rendezvous store listens on the rendezvous address only: loopback for a launch on one host.

torch's own TCPStore("127.0.0.1", ...) listens on every interface; gnn_dist.runtime.rendezvous binds the
socket itself and hands it to the store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # an mpiexec launch

SCRIPT = """
import json
import psutil
import torch.distributed as dist
import gnn_dist as gd

with gd.init() as ctx:
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    listening = [[c.laddr.ip, c.laddr.port] for c in psutil.Process().net_connections("tcp") if c.status == "LISTEN"]
    if ctx.rank == 0:
        print(json.dumps({"store": [store.host, store.port], "listening": listening}), flush=True)
"""


def test_the_store_of_a_single_host_launch_listens_on_loopback_only():
    r = subprocess.run([str(Path(sys.executable).with_name("mpiexec")), "-n", "2", sys.executable, "-c", SCRIPT],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    host, port = seen["store"]
    assert host == "127.0.0.1"
    assert [ip for ip, p in seen["listening"] if p == port] == ["127.0.0.1"], seen
