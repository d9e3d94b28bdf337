"""CPU halo all-to-alls over MPI under mpiexec: the same bytes as gloo, agreed plans, the same training."""
from __future__ import annotations

import json

import pytest

from tests.conftest import cli_partition, run_mpi, run_worker

pytestmark = pytest.mark.slow  # multi-rank launches


def test_mpi_and_gloo_deliver_the_same_bytes_and_plans_agree_on_one(tmp_path):
    """Any dtype, shape and split arrives byte for byte; small plans take MPI, one rank's large plan takes
    every rank's to gloo."""
    run_worker(3, "transport_worker.py", str(tmp_path))
    for r in range(3):
        assert (tmp_path / f"rank{r}.txt").read_text() == "ok", (r, (tmp_path / f"rank{r}.txt").read_text())


@pytest.mark.parametrize("world", [2, 4])
def test_training_over_mpi_equals_training_over_gloo(tmp_path, world, monkeypatch):
    """auto takes MPI where ranks do not outnumber cores: here as on a 16-core host, so 4 ranks take it too."""
    monkeypatch.setenv("GNN_DIST_HOST_CORES", "16")
    part = cli_partition(tmp_path, "karate", world)
    losses = {}
    for transport in ("auto", "gloo"):
        log = tmp_path / f"{transport}.jsonl"
        run_mpi(world, "train", "--partition", part, "--epochs", "5", "--quiet", "--transport", transport, "--log", log)
        losses[transport] = [json.loads(line)["loss"] for line in log.read_text().splitlines()]
    assert losses["auto"] == losses["gloo"]  # bytes are bytes: bit-identical runs
