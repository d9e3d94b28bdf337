"""Ranks sharing a GPU: where each rank computes and how collectives travel, and the host-staged path on CPU.

The staged path (device tensors through host buffers over gloo or MPI) is device-agnostic: on a CPU
run, GNN_DIST_STAGE_HOST=1 stages CPU tensors through separate host buffers, so CI proves it gives
the bits the direct path gives. tests/test_gpu_ranks.py runs it on a real shared GPU.
"""
from __future__ import annotations

import json

import pytest
import torch

from gnn_dist.runtime.placement import choose
from partition.errors import LaunchError
from tests.conftest import cli_partition, run_mpi, run_worker


@pytest.mark.parametrize("backend, local_size, gpus, want", [
    (None, 4, 0, ("gloo", "cpu", False)),  # no GPU: the CPU
    ("gloo", 2, 8, ("gloo", "cpu", False)),  # asked for the CPU
    (None, 2, 2, ("nccl", "cuda:1", False)),  # a GPU each
    (None, 4, 1, ("gloo", "cuda:0", True)),  # four ranks share one GPU
    (None, 4, 2, ("gloo", "cuda:1", True)),  # two per GPU
    ("staged", 1, 1, ("gloo", "cuda:0", True)),  # no GPUDirect: staged by request
    ("nccl", 1, 1, ("nccl", "cuda:0", False)),
])
def test_placement(backend, local_size, gpus, want, monkeypatch):
    monkeypatch.delenv("GNN_DIST_STAGE_HOST", raising=False)
    p = choose(backend, local_rank=local_size - 1 if local_size < 4 else 3, local_size=local_size, gpus=gpus)
    assert (p.backend, str(p.device), p.staged) == want
    assert (p.note is None) == (p.device.type == "cpu")  # rank 0 names the choice wherever a GPU is in play


def test_placement_agrees_across_hosts():
    """A host with a GPU per rank still stages when another host cannot: every rank picks one backend."""
    p = choose(None, 0, 2, 2, agree=lambda own: False)
    assert (p.backend, p.staged) == ("gloo", True)


@pytest.mark.parametrize("backend, local_size, gpus, needle", [
    ("nccl", 2, 1, "NCCL needs one GPU per rank"), ("nccl", 1, 0, "needs CUDA"), ("staged", 1, 0, "needs CUDA"),
    ("mpi", 1, 0, "unknown backend"),
])
def test_placement_refuses(backend, local_size, gpus, needle):
    with pytest.raises(LaunchError, match=needle):
        choose(backend, 0, local_size, gpus)


def test_host_env_stages_the_cpu(monkeypatch):
    monkeypatch.setenv("GNN_DIST_STAGE_HOST", "1")
    p = choose(None, 0, 2, 0)
    assert (p.backend, p.device, p.staged) == ("gloo", torch.device("cpu"), True) and "GNN_DIST_STAGE_HOST" in p.note


@pytest.mark.slow
def test_staged_collectives_deliver_the_direct_bits(tmp_path):
    """Every codec's byte records, uneven splits with an empty block, float64 and bfloat16 rows, stale
    (completed an epoch later) and skipped blocks, over gloo and MPI; sums, broadcasts and BatchNorm."""
    run_worker(3, "staging_worker.py", str(tmp_path))
    for r in range(3):
        assert (tmp_path / f"rank{r}.txt").read_text() == "ok", (r, (tmp_path / f"rank{r}.txt").read_text())


@pytest.mark.slow
def test_training_staged_equals_direct(tmp_path, monkeypatch):
    """`gnn-dist train` at P=2: staged through host buffers, bit for bit the direct run, and rank 0 says so."""
    part = cli_partition(tmp_path, "cora", 2)
    logs = {}
    for mode in ("direct", "staged"):
        monkeypatch.setenv("GNN_DIST_STAGE_HOST", "1" if mode == "staged" else "0")
        logs[mode] = tmp_path / f"{mode}.jsonl"
        r = run_mpi(2, "train", "--partition", part, "--epochs", "8", "--quiet", "--log", logs[mode])
        assert ("[gnn-dist] GNN_DIST_STAGE_HOST=1" in r.stderr) == (mode == "staged"), r.stderr
    recs = {m: [json.loads(ln) for ln in p.read_text().splitlines()] for m, p in logs.items()}
    assert len(recs["direct"]) == 8
    for key in ("loss", "train_acc", "val_acc", "test_acc"):
        assert [x[key] for x in recs["direct"]] == [x[key] for x in recs["staged"]], key
