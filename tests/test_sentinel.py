"""A rank's sentinel process (gnn_dist.runtime.sentinel), without MPI: it beats, announces its rank's death
at once, and tells its rank when a peer has gone silent. The test process holds the store and plays the peers."""
from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import psutil
import torch.distributed as dist

from gnn_dist.runtime.sentinel import peek
from tests.conftest import ROOT

RANK = """
import sys, time
from gnn_dist.runtime.sentinel import Sentinel, Spec

def told(failure):
    print("told", failure.encode().replace("\\t", "|"), flush=True)

Sentinel(Spec("127.0.0.1", int(sys.argv[1]), rank=1, world_size=3, prefix="t/", period_s=0.2, timeout_s=1.0), told)
print("started", flush=True)
time.sleep(60)
"""


def start_rank(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", RANK, str(port)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "started"
    return proc


def wait_for(predicate, timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.02)
    return time.monotonic() - start


def test_a_sentinel_beats_and_announces_its_ranks_death():
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    rank = start_rank(store.port)
    try:
        sentinel = psutil.Process(rank.pid).children()[0]
        wait_for(lambda: peek(store, "t/hb/1") is not None)
        beat = int(store.get("t/hb/1"))
        wait_for(lambda: int(store.get("t/hb/1")) > beat)
        rank.send_signal(signal.SIGKILL)
        wait_for(lambda: peek(store, "t/failed") is not None, timeout=2.0)
        assert store.get("t/failed").decode() == "1\t3\tits process ended"
        assert int(store.add("t/left", 0)) == 1
        wait_for(lambda: not sentinel.is_running() or sentinel.status() == psutil.STATUS_ZOMBIE, timeout=2.0)
    finally:
        rank.kill()


def test_a_silent_peer_is_lost_and_a_published_failure_reaches_the_rank():
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    rank = start_rank(store.port)
    try:
        for beat in range(5):  # peers 0 and 2 beat, then peer 2 falls silent: lost after the 1 s timeout
            store.set("t/hb/0", str(beat))
            store.set("t/hb/2", str(beat))
            time.sleep(0.2)
        start = time.monotonic()
        while peek(store, "t/failed") is None and time.monotonic() - start < 8:
            store.set("t/hb/0", str(time.monotonic()))
            time.sleep(0.1)
        assert 0.8 < time.monotonic() - start < 8  # not before the timeout; soon after it (a loaded machine is slow)
        assert store.get("t/failed").decode() == "2\t3\tno heartbeat for 1 s"
        assert rank.stdout.readline().strip() == "told 2|3|no heartbeat for 1 s"
    finally:
        rank.kill()
