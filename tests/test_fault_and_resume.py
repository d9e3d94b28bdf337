"""A killed rank takes the job down promptly and by name; --resume then reaches the uninterrupted result."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import cli_partition

MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))
EPOCHS = 200  # long enough that the kill lands mid-run however fast an epoch is


def train_cmd(part: Path, log: Path, ckpt: Path, *extra: str) -> list[str]:
    # -disable-auto-cleanup: let gnn-dist's own watchdog, not hydra's SIGKILL, end the survivors
    return [MPIEXEC, "-disable-auto-cleanup", "-n", "4", sys.executable, "-m", "gnn_dist", "train",
            "--partition", str(part), "--epochs", str(EPOCHS), "--quiet", "--log", str(log),
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5", "--eval-every", "0", "--seed", "3", *extra]


def ranks_of(proc: subprocess.Popen) -> dict[int, psutil.Process]:
    out = {}
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            env = child.environ()
        except psutil.Error:
            continue
        if "PMI_RANK" in env and "gnn_dist" in " ".join(child.cmdline()):
            out[int(env["PMI_RANK"])] = child
    return out


def final_loss(log: Path) -> float:
    return [r for r in map(json.loads, log.read_text().splitlines()) if "loss" in r][-1]["loss"]


@pytest.fixture(scope="module")
def cora4(tmp_path_factory):
    return cli_partition(tmp_path_factory.mktemp("fault"), "cora", 4)


def test_killed_rank_stops_everyone_and_resume_matches(cora4, tmp_path):
    log, ckpt = tmp_path / "run.jsonl", tmp_path / "ckpt"
    proc = subprocess.Popen(train_cmd(cora4, log, ckpt), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 10):
        time.sleep(0.2)
    ranks = ranks_of(proc)
    assert len(ranks) == 4 and proc.poll() is None
    survivors = [p for r, p in ranks.items() if r != 2]
    os.kill(ranks[2].pid, signal.SIGKILL)
    t_kill = time.monotonic()
    out, _ = proc.communicate(timeout=90)
    gone, alive = psutil.wait_procs(survivors, timeout=max(1, 60 - (time.monotonic() - t_kill)))
    assert not alive, "a surviving rank outlived 60 s"
    assert time.monotonic() - t_kill < 60
    assert proc.returncode != 0
    assert all(p.returncode != 0 for p in gone if p.returncode is not None)
    # named on stderr, and in the log by whichever survivor failed first (hydra may drop stderr, and it
    # kills the other survivors once one exits)
    errors = [r["error"] for r in map(json.loads, log.read_text().splitlines()) if "error" in r]
    assert any("rank 2 lost" in e for e in errors), (errors, out[-2000:])
    assert "rank 2 lost" in out or errors, out[-2000:]
    assert (ckpt / "checkpoint.pt").exists()

    r = subprocess.run(train_cmd(cora4, log, ckpt, "--resume"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    resumed = final_loss(log)

    clean_log = tmp_path / "clean.jsonl"
    r = subprocess.run(train_cmd(cora4, clean_log, tmp_path / "ckpt2"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert abs(resumed - final_loss(clean_log)) < 1e-6
