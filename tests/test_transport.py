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
    """auto takes MPI where ranks do not outnumber cores: here as on a 16-core host, so 4 ranks take it too.
    The log counts, per channel, the all-to-alls that went over MPI: some under auto, none under gloo."""
    monkeypatch.setenv("GNN_DIST_HOST_CORES", "16")
    part = cli_partition(tmp_path, "karate", world)
    losses, mpi_calls = {}, {}
    for transport in ("auto", "gloo"):
        log = tmp_path / f"{transport}.jsonl"
        run_mpi(world, "train", "--partition", part, "--epochs", "5", "--quiet", "--transport", transport, "--log", log)
        records = [json.loads(line) for line in log.read_text().splitlines()]
        losses[transport] = [r["loss"] for r in records]
        mpi_calls[transport] = [sum(c["mpi_calls"] for c in r["halo"].values()) for r in records]
    assert all(n > 0 for n in mpi_calls["auto"]) and not any(mpi_calls["gloo"]), mpi_calls
    assert losses["auto"] == losses["gloo"]  # bytes are bytes: bit-identical runs
